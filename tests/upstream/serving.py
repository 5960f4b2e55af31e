"""uvicorn in a test's background thread: the listening socket and a server that stops when asked.

Every server the tests run in a thread (the scripted upstream, ``ProxyServer``, the shared-router proxy)
starts and stops hundreds of times in one run, so what uvicorn spends waiting at either end adds up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import uvicorn

POLL = 0.005  # how often shutdown looks whether the last connection and task have ended


def tcp_listener(port: int = 0) -> socket.socket:
    """A socket bound on 127.0.0.1 for uvicorn's ``sockets=``, made as ``serve`` makes its own (``run.bind``:
    the protocol IPPROTO_TCP, not 0): asyncio turns Nagle's algorithm off only on the connections of such a
    socket. With ``socket.socket()`` every response uvicorn writes in two parts (headers, then body) on a
    kept-alive connection waited for the client's delayed ACK, 40 ms a request, most of a tool loop's time."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


class ThreadServer(uvicorn.Server):
    """``uvicorn.Server`` that ``stop()`` ends at once. uvicorn notices ``should_exit`` on a 0.1 s tick and
    then pauses 0.1 s before it waits (in 0.1 s steps) for the connections to end: ~0.2 s a server, idle.
    Here ``stop()`` wakes the loop, and shutdown waits for the same things (connections told to close, the
    tasks, up to ``timeout_graceful_shutdown``, then the lifespan's shutdown) in steps of ``POLL``."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def stop(self) -> None:
        """Ask the server to end (from any thread); ``run`` returns soon after."""
        self.should_exit = True
        wake, loop = self._wake, self._loop
        if wake is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):  # the Date header once a second, and should_exit
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()  # an idle kept-alive connection closes now, a busy one after its response
        grace = self.config.timeout_graceful_shutdown
        deadline = time.monotonic() + (grace if grace is not None else float("inf"))
        while (state.connections or state.tasks) and time.monotonic() < deadline:
            await asyncio.sleep(POLL)
        for task in state.tasks:
            task.cancel(msg="the test server stopped")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()
