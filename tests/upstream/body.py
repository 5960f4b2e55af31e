"""The scripted upstream's ASGI response: sends its pieces one by one and records each before sending.

It can stop part way (a cut stream: uvicorn then closes the connection without the final chunk), paces SSE
events, gzips JSON for clients that accept it, and notices a client that leaves before the end.
"""

from __future__ import annotations

import asyncio
import gzip

from starlette.types import Receive, Scope, Send

from .recorded import RecordedRequest


class ScriptedBody:
    """An ASGI response that sends ``chunks`` one by one, records them, and can stop without finishing."""

    def __init__(
        self,
        record: RecordedRequest,
        status: int,
        headers: dict[str, str],
        chunks: list[bytes],
        *,
        cut_after: int | None = None,
        event_delay: float = 0.0,
        gzip_json: bool = False,
    ) -> None:
        self.record, self.status, self.headers, self.chunks = record, status, headers, chunks
        self.cut_after, self.event_delay, self.gzip_json = cut_after, event_delay, gzip_json

    def _whole(self) -> tuple[list[bytes], int | None]:
        """A non-streamed body as one piece with its content-length (gzipped when ``gzip_json`` is set and the
        client accepts it); when it is to be cut, only its first half is sent."""
        body = b"".join(self.chunks)
        if self.gzip_json and "gzip" in self.record.headers.get("accept-encoding", ""):
            body = gzip.compress(body, mtime=0)
            self.headers["content-encoding"] = "gzip"
        self.headers["content-length"] = str(len(body))
        if self.cut_after is None:
            return [body], None
        return [body[: len(body) // 2], body[len(body) // 2 :]], 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._finished = False
        watcher = asyncio.create_task(self._watch_for_disconnect(receive))
        try:
            await self._send_all(send)
        finally:
            watcher.cancel()

    async def _watch_for_disconnect(self, receive: Receive) -> None:
        """Note a client that leaves before the body is complete (uvicorn reports it as http.disconnect)."""
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self._finished:
            self.record.client_disconnected = True

    async def _send_all(self, send: Send) -> None:
        streaming = self.headers.get("content-type", "").startswith("text/event-stream")
        chunks, cut_after = (self.chunks, self.cut_after) if streaming else self._whole()
        headers = [(k.encode(), v.encode()) for k, v in self.headers.items()]
        self.record.status, self.record.response_headers = self.status, dict(self.headers)
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        for index, chunk in enumerate(chunks):
            if cut_after is not None and index >= cut_after:
                return  # uvicorn closes the connection mid-body: the client sees a broken response
            if streaming and index and self.event_delay:
                await asyncio.sleep(self.event_delay)
            if self.record.client_disconnected:
                return  # like the real APIs, stop generating for a client that has gone
            # Recorded before sending: the client may have read it all before ``send`` returns.
            self.record.response.extend(chunk)
            self.record.completed = index == len(chunks) - 1
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        self._finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
