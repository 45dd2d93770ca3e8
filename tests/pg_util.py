"""A throwaway PostgreSQL server for tests: initdb + pg_ctl into a temporary directory, 127.0.0.1, a free port."""

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SKIP_REASON = (
    "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin: "
    "apt-get install postgresql (.ci/run installs it)"
)


def server_bin() -> Path | None:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    folders = [Path(found).resolve().parent] if found else []
    folders += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    return next((f for f in folders if (f / "initdb").is_file() and (f / "pg_ctl").is_file()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """initdb refuses to run as root: as root, the server runs as the unprivileged ``postgres`` user."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="kernelskill-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")  # KeyError: no such user
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> "PostgresServer":
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "kernelskill", "-N")
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        log = str(self.root / "server.log")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", log, "-w", "-t", "60", "start")
        return self

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://kernelskill@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        name = f"t_{secrets.token_hex(4)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
