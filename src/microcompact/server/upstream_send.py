"""The proxy's one pooled client to the upstreams, and a request's way up through it: sent once, and when
the upstream refuses a thinking block a fold left, retried as the request's thinking plan says (the refusal
arrives before any byte went to the client, so the client sees only the answer that stands)."""

from __future__ import annotations

import functools
import os
import ssl

import anyio
import httpx

from .limits import Limits
from .thinking import ThinkingPlan, is_binding_refusal


class UpstreamSender:
    """Open for the app's lifespan (:meth:`open`, :meth:`close`); :meth:`send` in between."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.client: httpx.AsyncClient | None = None

    def open(self) -> None:
        # trust_env: HTTPS_PROXY / NO_PROXY / SSL_CERT_FILE apply to the upstream, as they do for the agent itself
        self.client = httpx.AsyncClient(
            timeout=self.limits.upstream_timeout(),
            limits=self.limits.upstream_pool(),
            trust_env=True,
            verify=tls_context(),
        )

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def send(
        self, outgoing: httpx.Request, sent: list[tuple[str, str]], headers: dict[str, str], plan: ThinkingPlan | None
    ) -> httpx.Response:
        """The upstream's answer to ``outgoing`` (and to the plan's retries, whose headers join ``headers``);
        cancelled, it leaves no upstream response open."""
        assert self.client is not None, "the app's lifespan did not run"
        response = await self.client.send(outgoing, stream=True)
        if plan is not None:
            try:
                response = await self._refusal_fixed(plan, outgoing, sent, response)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
                raise
            headers.update(plan.headers)
        return response

    async def _refusal_fixed(
        self, plan: ThinkingPlan, first: httpx.Request, sent: list[tuple[str, str]], response: httpx.Response
    ) -> httpx.Response:
        """``response``, or when it refuses a thinking block the proxy's fold left, the answer to the plan's
        retries. Any other answer goes on as is."""
        assert self.client is not None
        retries = plan.retries()
        while response.status_code == 400:
            try:
                refusal = await response.aread()
            finally:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            attempt = next(retries, None) if is_binding_refusal(response.status_code, refusal) else None
            if attempt is None:
                return httpx.Response(400, headers=response.headers, stream=httpx.ByteStream(refusal))
            retry = httpx.Request(first.method, first.url, headers=plan.upstream_headers(sent), content=attempt.content)
            response = await self.client.send(retry, stream=True)
        plan.answered(response.status_code)
        return response


def tls_context() -> ssl.SSLContext:
    """The TLS context httpx builds for this environment (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else certifi's
    bundle), built once per pair of those variables: building one loads the CA bundle (~30 ms of CPU), and
    every app a process starts (a test suite starts hundreds) and every doctor check would build its own."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    del cert_file, cert_dir  # the cache's key: httpx reads the same variables
    return httpx.create_ssl_context(trust_env=True)
