"""``serve``'s side of ``summarizer: upstream``: each answered request is remembered for its conversation's
summarizer, and the summary requests it sends are billed as what they are, the client's own model's.

:func:`remember` is called once a compacted request's answer has come back whole and successful: the request
as it went upstream (``httpx.Request``: URL, headers, body) becomes the prefix the next summary requests
reuse, so they go to that upstream only, with that request's credential only. The Anthropic Messages, OpenAI
Chat Completions, OpenAI Responses and Gemini ``generateContent`` / ``streamGenerateContent`` routes are
served. A Gemini summary request goes to the same model's ``:generateContent`` (one JSON answer, even when
the client streamed: ``alt=sse`` is dropped, every other query parameter, ``key`` included, kept as sent).
A Gemini request that asks for structured output (``responseMimeType`` JSON, a response schema: Gemini
CLI's side requests) is not remembered: notes cannot be written in its schema, and the conversation's
previous request holds the same prefix.

A summary request's cost goes into the session's bill (``Compaction.bills``,
:meth:`~microcompact.bill.proxy_bills.ProxyBills.charge_summary_request`) at the client's model's prices:
the cache read, the cache written and the plain input the answer reports, and its output. Its
``proxy_cost`` figure shows it with the conversation's next request, as a summarizer's calls are shown.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from ..bill.cache_usage import UsageReport
from ..bill.proxy_bills import ProxyBills
from ..config import Config
from ..summarizers.upstream import UpstreamRequest, upstream_link
from ..summarizers.upstream_wire import Answer
from ..wire import WireApi
from .compaction import Prepared


def summary_url(api: WireApi, url: httpx.URL) -> str:
    """Where ``api``'s summary requests go: ``url`` itself, or for Gemini its ``:generateContent`` (a
    streamed request's method and its ``alt`` parameter replaced; the rest of the query byte for byte)."""
    if api is not WireApi.GEMINI or not url.path.endswith(":streamGenerateContent"):
        return str(url)
    path = url.raw_path.split(b"?", 1)[0].removesuffix(b":streamGenerateContent") + b":generateContent"
    query = b"&".join(pair for pair in url.query.split(b"&") if pair and pair.split(b"=", 1)[0] != b"alt")
    return str(url.copy_with(raw_path=path + (b"?" + query if query else b"")))


# Any of these in a Gemini body may ask for structured output (parsed only then).
_STRUCTURED = (b"responseSchema", b"responseJsonSchema", b"application/json", b"text/x.enum")


def structured(body: bytes) -> bool:
    """A Gemini request whose generationConfig asks for JSON or enum output, or gives a response schema."""
    if not any(word in body for word in _STRUCTURED):
        return False
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    config = parsed.get("generationConfig") if isinstance(parsed, dict) else None
    if not isinstance(config, dict):
        return False
    schema = any(config.get(k) is not None for k in ("responseSchema", "responseJsonSchema", "_responseJsonSchema"))
    return schema or config.get("responseMimeType") not in (None, "text/plain")


def remember(prepared: Prepared, request: httpx.Request, bills: ProxyBills) -> None:
    """Tell the conversation's upstream summarizer (if it has one) the request that was just answered."""
    session = prepared.session
    if session is None:
        return
    link = upstream_link(session.summarizer)
    api = prepared.wire  # the summary wire is the route's own request format
    if link is None or api is None or (api is WireApi.GEMINI and structured(request.content)):
        return
    session_id, config, priced_as, model = session.session_id, session.config, prepared.api, prepared.model

    def bill(answer: Answer) -> None:
        charge(bills, session_id, config, priced_as, answer, model)

    url = summary_url(api, request.url)
    link.remember(UpstreamRequest(api, url, tuple(request.headers.multi_items()), request.content, bill))


def charge(
    bills: ProxyBills, session_id: str, config: Config, api: str | None, answer: Answer, model: str | None = None
) -> float:
    """Bill one summary request at the client's model's prices (read, written, plain input, output); its
    dollars (0 when no price is known)."""
    pricing = config.cache_pricing(api, model)
    if pricing is None:
        return 0.0
    report = UsageReport(answer.prompt_tokens, answer.cache_read_tokens, answer.cache_write_tokens)
    return bills.charge_summary_request(session_id, pricing, report, answer.output_tokens)
