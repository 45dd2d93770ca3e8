"""Processes, sockets and file writes the candidate's own code starts, refused at run time.

The static checks reject ``os.system``, ``open`` and the like by name; a name computed at run time
(``getattr(os, "sys" + "tem")``) gets past them. This is the check at run time: a Python audit hook
(:func:`sys.addaudithook`, which cannot be removed once added) in the review process sees every process
start, socket connection, file opened for writing and file removed or renamed, and refuses it where the
code that asked for it is the candidate's: the innermost caller outside the standard library is neither
an installed package (PyTorch, Triton: they compile kernels, run ``ptxas`` and write their caches) nor the
reviewer's own package. Each refusal raises ``PermissionError`` in the candidate and is kept
(:func:`attempts`); the integrity check rejects the candidate for it (:mod:`.integrity`).

Not a sandbox: an installed package's function that runs a command or writes a file on the caller's
behalf passes, as does anything below Python (ctypes is rejected statically).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

EVENTS = (
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen",
    "os.kill", "os.killpg", "socket.connect", "socket.bind", "socket.sendto", "os.remove", "os.rmdir",
    "os.rename", "shutil.rmtree", "os.truncate", "os.chmod", "os.symlink", "os.link", "os.putenv", "os.unsetenv",
)  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

_attempts: Callable[[], list[str]] | None = None


def trusted_roots() -> tuple[str, ...]:
    """Installed packages' folders and the folder above the reviewer's packages (each ending in a separator).

    The reviewer's packages (``runner``, ``engine``, ...) lie side by side in one folder: its modules imported
    later (the engine's, writing a kernel's source to import it) are trusted too.
    """
    roots = set(site.getsitepackages()) | {site.getusersitepackages()}
    roots |= {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if file and (name in ("torch", "triton", "numpy") or name.startswith("kernelskill.")):
            roots.add(os.path.dirname(os.path.dirname(file)))
    return tuple(sorted(_folder(r) for r in roots if r))


def _folder(path: str) -> str:
    """``path`` resolved, ending in a separator (a prefix that matches only what lies inside it)."""
    return os.path.join(os.path.realpath(path), "")


def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(_folder(paths[k]) for k in ("stdlib", "platstdlib"))


def _writes(event: str, args: tuple[Any, ...]) -> bool:
    """An ``open`` event that may write (its mode or flags)."""
    if event != "open":
        return False
    mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def install(*untrusted: str) -> None:
    """Add the audit hook to this process (once; it stays for the process's life).

    ``untrusted``: folders whose code is the candidate's even where they lie under a trusted root.
    """
    global _attempts
    if _attempts is not None:
        return
    trusted, stdlib = trusted_roots(), _stdlib_roots()
    own = tuple(_folder(u) for u in untrusted if u)
    found: list[str] = []
    verdicts: dict[str, bool | None] = {}

    def candidates(filename: str) -> bool | None:
        """True: the candidate's code; False: trusted; None: the standard library (look further out)."""
        if filename not in verdicts:
            path = "" if filename.startswith("<") else os.path.realpath(filename)
            if not path or (own and path.startswith(own)):
                verdicts[filename] = True  # "<string>", the candidate's folder
            elif path.startswith(trusted):
                verdicts[filename] = False
            elif path.startswith(stdlib):
                verdicts[filename] = None
            else:
                verdicts[filename] = True
        return verdicts[filename]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not (event.startswith(EVENTS) or _writes(event, args)):
            return
        frame: Any = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            verdict = None if filename.startswith("<frozen") else candidates(filename)  # importlib's own
            if verdict is False:
                return
            if verdict:
                what = f"{event}({', '.join(repr(a)[:80] for a in args[:2])})"
                found.append(what)
                raise PermissionError(f"the review refuses {what}: a candidate runs no process and writes no file")
            frame = frame.f_back

    _attempts = lambda: list(found)  # noqa: E731 - a closure: the list is reachable through it alone
    sys.addaudithook(hook)


def attempts() -> list[str]:
    """What the hook refused so far in this process (empty before :func:`install`)."""
    return _attempts() if _attempts is not None else []
