"""``microcompact serve``'s app in this process: uvicorn on a random 127.0.0.1 port in a background thread,
in front of a scripted upstream, with a real SQLite store that survives a restart of the proxy."""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from microcompact.config import Config
from microcompact.router import SessionRouter
from microcompact.server import Proxy, ProxySettings
from microcompact.server.run import proxy_config
from microcompact.store import open_store
from upstream.serving import ThreadServer, tcp_listener


class ProxyServer:
    def __init__(
        self,
        upstream_url: str,
        db: Path | str,
        *,
        context_limit: int | None = None,
        config: Config | None = None,
        api_key: str | None = None,
        port: int = 0,
        share_sessions_across_keys: bool = False,
        salt_file: Path | None = None,
        audit: bool = False,
        gemini_upstream: str | None = None,
        shared: bool = False,  # other proxies on the same store (serve --shared)
    ) -> None:
        self.config = config or proxy_config(None, context_limit)
        self.store = open_store(db)
        self.router = SessionRouter(self.config, store=self.store, shared=shared)
        settings = ProxySettings(
            openai_upstream=f"{upstream_url}/v1",
            anthropic_upstream=upstream_url,
            api_key=api_key,
            share_sessions_across_keys=share_sessions_across_keys,
            salt_file=salt_file or _salt_beside(db),
            audit=audit,
            **({"gemini_upstream": gemini_upstream} if gemini_upstream else {}),
        )
        self.proxy = Proxy(self.router, settings)
        self._socket = tcp_listener(port)
        self.port: int = self._socket.getsockname()[1]
        self.received: list[tuple[str, bytes]] = []  # (path, body) of every POST the proxy got, in order
        self._server = ThreadServer(
            uvicorn.Config(self._recording(self.proxy.app()), log_level="warning", access_log=False, lifespan="on")
        )
        self._thread: threading.Thread | None = None

    def _recording(self, app: ASGIApp) -> ASGIApp:
        """``app``, with each POST body the clients sent kept in ``received`` (to compare with what went up)."""

        async def recording(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            chunks: list[bytes] = []

            async def tee() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        self.received.append((scope["path"], b"".join(chunks)))
                return message

            await app(scope, tee, send)

        return recording

    def client_messages(self, path: str = "/v1/messages") -> list[list[dict[str, Any]]]:
        """The ``messages`` of every request the clients sent to ``path``, in order."""
        return [json.loads(body)["messages"] for p, body in self.received if p == path]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyServer:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="proxy", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.005)
        return self

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every answered request's follow-up and every background pass has finished."""
        deadline = time.monotonic() + timeout
        while self.proxy.follow_ups_running and time.monotonic() < deadline:
            time.sleep(0.01)
        for session in self.router.sessions():
            session.drain(timeout)

    def close(self) -> None:
        self._server.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
        self.router.close()
        self.store.close()

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _salt_beside(db: Path | str) -> Path:
    """The session salt next to a SQLite file (a restart on the same store derives the same keys, and no
    test writes into the user's $MICROCOMPACT_HOME); a fresh directory's for any other store."""
    text = str(db)
    if text.startswith(("postgres://", "postgresql://", ":memory:")):
        return Path(tempfile.mkdtemp(prefix="mc-salt-")) / "session-salt"
    return Path(text.removeprefix("sqlite:///")).parent / "session-salt"


__all__ = ["ProxyServer"]
