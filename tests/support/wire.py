"""Loopback helpers for the wire-limit tests: an upstream that accepts and never answers (counting the
connections it holds), a port that never completes a connect, raw HTTP/1.1 over sockets, and a process's
peak memory."""

from __future__ import annotations

import json
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class HangingUpstream:
    """Accepts connections on 127.0.0.1, reads what they send, never answers; ``open`` is how many are still
    connected (a peer that closes is noticed at once), ``accepted`` how many came in all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._open: set[socket.socket] = set()
        self.accepted = 0
        self.received = 0  # bytes
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hanging-upstream", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open(self) -> int:
        with self._lock:
            return len(self._open)

    def __enter__(self) -> HangingUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in list(self._open):
            conn.close()
        self._listener.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                else:
                    self._read(sock)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ)
        with self._lock:
            self._open.add(conn)
            self.accepted += 1

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.received += len(data)
            return
        self._selector.unregister(conn)
        conn.close()
        with self._lock:
            self._open.discard(conn)


class Blackhole:
    """A 127.0.0.1 port whose accept queue is full: a connect to it never completes (SYNs are dropped)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        self.port = self._listener.getsockname()[1]
        self._held = socket.create_connection(("127.0.0.1", self.port), timeout=5)  # fills the queue

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._held.close()
        self._listener.close()


def wait_for(check: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    """Poll ``check`` until it holds or ``timeout`` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


def request_head(method: str, path: str, port: int, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def raw_request(port: int, method: str, path: str, body: bytes, headers: dict[str, str]) -> socket.socket:
    """A socket that has sent one whole request (and not read the answer)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = request_head(method, path, port, {**headers, "Content-Length": str(len(body))})
    sock.sendall(head + body)
    return sock


def read_response(sock: socket.socket, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body (Content-Length framed) of the answer on ``sock``."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(status_line.split()[1]), headers, rest[:length]


def closed_by_peer(sock: socket.socket) -> bool:
    """True when the other end closed ``sock`` (without blocking)."""
    sock.setblocking(False)
    try:
        return sock.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), KiB."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found, status
    return int(found.group(1))


def nest(depth: int, leaf: str = '"leaf"') -> str:
    """JSON text of ``depth`` nested objects around ``leaf`` (as text: json.dumps itself stops near 1000)."""
    return '{"d":' * depth + leaf + "}" * depth


def with_deep(template: dict[str, Any], deep_text: str) -> bytes:
    """``template`` as JSON with the string ``"DEEP"`` replaced by ``deep_text``."""
    text = json.dumps(template)
    assert text.count('"DEEP"') == 1, text
    return text.replace('"DEEP"', deep_text).encode()
