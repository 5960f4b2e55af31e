"""httpx's one-shot calls (``get``, ``post``, ``request``, ``stream``) for the servers the tests start on
127.0.0.1, with one TLS context for the whole run.

Each of httpx's module functions builds a client for the call, and each client loads the CA bundle into a
new TLS context: ~30 ms of CPU, paid about a thousand times by the fast suite although every URL here is
plain http. The calls below are httpx's own, one client per call as before (no connection outlives its
call, so a test counting a server's connections sees what it did), handed a context made once.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

_TLS = ssl.create_default_context()  # never used for 127.0.0.1's plain http; made once instead of per call


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, url, verify=_TLS, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=_TLS, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=_TLS, **kwargs)


@contextmanager
def stream(method: str, url: str, **kwargs: Any) -> Iterator[httpx.Response]:
    with httpx.stream(method, url, verify=_TLS, **kwargs) as response:
        yield response
