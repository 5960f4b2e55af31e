"""A TCP relay on 127.0.0.1 that records every byte both ways, read back as HTTP/1.1 exchanges.

Put between a real client (Claude Code) and ``microcompact serve``, it shows exactly what the client sent
and what it got back, framing included, without changing either: the proxy's own recording cannot
vouch for the bytes the proxy writes. The relay's target can change while it runs, so one client URL
survives a restart of the server behind it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

import h11


@dataclass
class Exchange:
    """One request and the response the client read, both as they crossed the wire (bodies de-chunked)."""

    started: float  # monotonic time the request's first bytes arrived
    method: str
    target: str
    request_headers: dict[str, str]  # lower-case names; the last value wins
    request_body: bytes
    status: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""
    complete: bool = False  # the response's end was seen

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass
class _Connection:
    opened: float
    sent: bytearray = field(default_factory=bytearray)  # client -> server
    received: bytearray = field(default_factory=bytearray)  # server -> client
    arrivals: list[tuple[int, float]] = field(default_factory=list)  # (offset in ``sent``, time) per chunk

    def time_at(self, offset: int) -> float:
        when = self.opened
        for start, at in self.arrivals:
            if start > offset:
                break
            when = at
        return when


class TapRelay:
    def __init__(self, target_port: int | None = None) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._connections: list[_Connection] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closing = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> TapRelay:
        thread = threading.Thread(target=self._accept, name="tap-accept", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def close(self) -> None:
        self._closing = True
        self._listener.close()

    def __enter__(self) -> TapRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            record = _Connection(time.monotonic())
            with self._lock:
                self._connections.append(record)
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port or 0), timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()  # the client sees a refused or reset connection, as it would without the relay
                continue
            thread = threading.Thread(target=_relay, args=(client, server, record), daemon=True)
            thread.start()
            self._threads.append(thread)

    def exchanges(self) -> list[Exchange]:
        """Every exchange so far, across connections, in the order the requests arrived."""
        with self._lock:
            connections = list(self._connections)
        found = [e for c in connections for e in _parse(c)]
        return sorted(found, key=lambda e: e.started)


def _relay(client: socket.socket, server: socket.socket, record: _Connection) -> None:
    """Copy both ways until both sides are done, then close both sockets."""
    back = threading.Thread(target=_pump, args=(server, client, record.received, None), daemon=True)
    back.start()
    _pump(client, server, record.sent, record.arrivals)
    back.join()
    client.close()
    server.close()


def _pump(
    source: socket.socket, sink: socket.socket, into: bytearray, arrivals: list[tuple[int, float]] | None
) -> None:
    """Copy ``source`` to ``sink``, keeping every byte; at the end of ``source``, end ``sink``'s sending too."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            if arrivals is not None:
                arrivals.append((len(into), time.monotonic()))
            into += chunk
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _parse(connection: _Connection) -> list[Exchange]:
    """The exchanges on one connection: h11 reads the requests as a server would and the responses as a
    client would, each side fed the other's events so keep-alive cycles and HEAD stay in step."""
    requests = h11.Connection(h11.SERVER)
    responses = h11.Connection(h11.CLIENT)
    sent = bytes(connection.sent)
    requests.receive_data(sent)
    requests.receive_data(b"")
    responses.receive_data(bytes(connection.received))
    responses.receive_data(b"")
    out: list[Exchange] = []
    while True:
        offset = len(sent) - len(requests.trailing_data[0])
        request = _next(requests)
        if not isinstance(request, h11.Request):
            return out
        body = bytearray()
        while isinstance(event := _next(requests), h11.Data):
            body += event.data
        exchange = Exchange(
            connection.time_at(offset),
            request.method.decode(),
            request.target.decode(),
            {k.decode(): v.decode() for k, v in request.headers},
            bytes(body),
        )
        out.append(exchange)
        responses.send(h11.Request(method=request.method, target=request.target, headers=request.headers))
        if body:
            responses.send(h11.Data(data=bytes(body)))
        responses.send(h11.EndOfMessage())
        response = _next(responses)
        while isinstance(response, h11.InformationalResponse):
            response = _next(responses)
        if not isinstance(response, h11.Response):
            return out
        exchange.status = response.status_code
        exchange.response_headers = {k.decode(): v.decode() for k, v in response.headers}
        received = bytearray()
        while isinstance(event := _next(responses), h11.Data):
            received += event.data
        exchange.response_body = bytes(received)
        exchange.complete = isinstance(event, h11.EndOfMessage)
        if not exchange.complete or responses.our_state is h11.MUST_CLOSE:
            return out
        requests.send(h11.Response(status_code=response.status_code, headers=response.headers))
        if received:
            requests.send(h11.Data(data=bytes(received)))
        requests.send(h11.EndOfMessage())
        if requests.our_state is not h11.DONE or requests.their_state is not h11.DONE:
            return out
        requests.start_next_cycle()
        responses.start_next_cycle()


def _next(connection: h11.Connection) -> object:
    try:
        return connection.next_event()
    except h11.RemoteProtocolError:
        return None


__all__ = ["Exchange", "TapRelay"]
