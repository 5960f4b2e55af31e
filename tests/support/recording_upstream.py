"""An upstream that only records: every request's method, path, query and headers, answered with an empty
JSON object. The routing tests put one in place of each provider to see which one a request (and its
credentials) reached."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Received:
    method: str
    path: str  # without the query
    query: str
    headers: dict[str, str]  # lower-case names


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        # the target as it came on the request line: ``self.path`` has a leading ``//`` collapsed by
        # http.server (a guard of its own), which would hide what the proxy sent
        target = self.requestline.split(" ")[1] if self.requestline.count(" ") >= 2 else self.path
        path, _, query = target.partition("?")
        headers = {name.lower(): value for name, value in self.headers.items()}
        with self.server.lock:
            self.server.received.append(Received(self.command, path, query, headers))
        body = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.received: list[Received] = []


class RecordingUpstream:
    """On 127.0.0.1, in a thread, until ``close``."""

    def __init__(self) -> None:
        self._httpd = _Server()
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="recording-upstream", daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}"

    @property
    def received(self) -> list[Received]:
        with self._httpd.lock:
            return list(self._httpd.received)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Received", "RecordingUpstream"]
