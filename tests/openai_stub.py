"""A tiny OpenAI-compatible server on 127.0.0.1 for endpoint tests (stops by itself).

``GET /v1/models`` lists ``models``; ``POST /v1/chat/completions`` first answers the queued
``faults`` (status codes, in order), then what ``reply(body)`` returns: a completion's text, a
``(text, finish_reason)`` pair, or an HTTP error status (int). Every
request is logged in ``requests``. The serving thread stops at ``stop()`` or after ``lifetime_s``.
"""

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer


class StubOpenAI:
    def __init__(
        self,
        reply: Callable[[dict], str | tuple[str, str] | int],
        models: tuple[str, ...] = ("stub-model",),
        faults: tuple[int, ...] = (),
        auth_status: int | None = None,
        lifetime_s: float = 120.0,
        port: int = 0,
    ):
        self.reply, self.models, self.faults = reply, models, list(faults)
        self.auth_status = auth_status
        self.requests: list[tuple[str, str, dict]] = []
        self.deadline = time.time() + lifetime_s
        self._stopped = False
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _denied(self) -> bool:
                if stub.auth_status:
                    self._send(stub.auth_status, {"error": {"message": "Incorrect API key provided", "code": 401}})
                    return True
                return False

            def do_GET(self):
                stub.requests.append(("GET", self.path, {}))
                if self._denied():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in stub.models]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                stub.requests.append(("POST", self.path, body))
                if self._denied():
                    return
                if stub.faults:
                    status = stub.faults.pop(0)
                    self._send(status, {"error": {"message": f"injected {status}"}}, {"retry-after-ms": "20"})
                    return
                answer = stub.reply(body)
                if isinstance(answer, int):  # an HTTP error status for this request
                    self._send(answer, {"error": {"message": f"stub answers {answer}"}})
                    return
                text, finish = (answer, "stop") if isinstance(answer, str) else answer
                self._send(
                    200,
                    {
                        "id": "chatcmpl-stub",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
                        ],
                        "usage": {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168},
                    },
                )

        self.server = HTTPServer(("127.0.0.1", port), Handler)  # port 0: any free one
        self.server.timeout = 0.2
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self._stopped and time.time() < self.deadline:
            self.server.handle_request()
        self.server.server_close()

    def chat_posts(self) -> list[dict]:
        return [b for m, p, b in self.requests if m == "POST" and p.endswith("/chat/completions")]

    def stop(self):
        self._stopped = True
        self.thread.join(timeout=5)


def free_port() -> int:
    """A port with nothing listening on it (for connection-refused tests)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
