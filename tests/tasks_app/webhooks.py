"""A webhook receiver on loopback for the push tests: records every request, fails as scripted."""

import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook on 127.0.0.1 that records every request and answers as scripted per path."""

    def __init__(self):
        self.requests: list[dict] = []
        self.failures: dict[str, int] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = min(int(self.headers.get("Content-Length") or 0), 1_000_000)
                body = self.rfile.read(length)
                with receiver.lock:
                    failing = receiver.failures.get(self.path, 0) > 0
                    if failing:
                        receiver.failures[self.path] -= 1
                    status = 500 if failing else 200
                    receiver.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body, "status": status}
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def received(self, path: str, *, succeeded_only: bool = False) -> list[dict]:
        with self.lock:
            return [
                r for r in self.requests if r["path"] == path and (r["status"] == 200 or not succeeded_only)
            ]

    def wait_for(self, path: str, count: int, timeout: float = 10.0) -> list[dict]:
        """The successful requests to path, once there are `count` of them (or the deadline passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.received(path, succeeded_only=True)) >= count:
                break
            time.sleep(0.05)
        # A short extra look catches anything sent twice.
        time.sleep(0.3)
        return self.received(path, succeeded_only=True)


def new_path() -> str:
    return f"/hook/{uuid.uuid4().hex}"
