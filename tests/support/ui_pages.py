"""A conversation driven through the proxy for the conversation page's tests: an OpenAI Chat tool loop
against the scripted upstream, tool outputs large enough to fold, one of them hostile."""

from __future__ import annotations

from typing import Any

import httpx

from support.proxy_server import ProxyServer

SECRET = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcd"  # a key a tool printed: redacted on the page
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>\x1b[31m\x07 " + "y" * 30_000
STEPS = 14


def drive(
    proxy: ProxyServer, headers: dict[str, str] | None = None, history: list[dict[str, Any]] | None = None
) -> tuple[str, int]:
    """A Chat Completions tool loop of ``STEPS`` requests, each tool output ~6 KB (one hostile): the
    conversation's id (from the X-Microcompact-Session header) and how many requests went through.
    ``history``: the conversation to go on with (extended in place)."""
    history = history if history is not None else []
    history[:] = history or [{"role": "user", "content": "Read the files one by one."}]
    session = ""
    with httpx.Client(base_url=proxy.base_url, timeout=30, headers=headers or {}) as client:
        for k in range(len(history) // 2, len(history) // 2 + STEPS):
            response = client.post(
                "/v1/chat/completions",
                json={"model": "gpt-4o", "messages": history},
                headers={"authorization": "Bearer sk-test", "user-agent": "page-test/1.0"},
            )
            assert response.status_code == 200, response.text
            session = response.headers["x-microcompact-session"]
            call = {"id": f"c{k}", "type": "function", "function": {"name": "read", "arguments": f'{{"p": "f{k}"}}'}}
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            output = HOSTILE if k == 1 else f"needle{k} " + " ".join(f"line {k}-{i}" for i in range(700))
            output += f" OPENAI_API_KEY={SECRET}" if k == 0 else ""
            history.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
            proxy.settle()
    return session, STEPS
