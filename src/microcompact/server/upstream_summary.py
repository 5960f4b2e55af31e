"""``serve``'s side of ``summarizer: upstream``: each answered request is remembered for its conversation's
summarizer, and the summary requests it sends are billed as what they are, the client's own model's.

:func:`remember` is called once a compacted request's answer has come back whole and successful: the request
as it went upstream (``httpx.Request``: URL, headers, body) becomes the prefix the next summary requests
reuse, so they go to that upstream only, with that request's credential only. The Anthropic Messages, OpenAI
Chat Completions and OpenAI Responses routes are served; on the Gemini routes the conversation's merges
are extractive.

A summary request's cost goes into the session's bill (``Compaction.bills``) at the client's model's
prices: the cache read, the cache written and the plain input the answer reports, and its output. Its
``proxy_cost`` figure shows it with the conversation's next request, as a summarizer's calls are shown.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import httpx

from ..cache_usage import SessionBill
from ..config import Config
from ..pricing import MILLION
from ..summarizers.upstream import UpstreamRequest, upstream_link
from ..summarizers.upstream_wire import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, Answer
from .compaction import Prepared


def wire_api(api: str | None, url: httpx.URL) -> str | None:
    """The summary wire of a request of ``api`` to ``url``, or None when its route has none."""
    if api == "anthropic" and url.path.endswith("/messages"):
        return ANTHROPIC
    if api == "openai" and url.path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if api == "openai" and url.path.endswith("/responses"):
        return OPENAI_RESPONSES
    return None


def remember(prepared: Prepared, request: httpx.Request, bills: MutableMapping[str, SessionBill]) -> None:
    """Tell the conversation's upstream summarizer (if it has one) the request that was just answered."""
    session = prepared.session
    if session is None:
        return
    link = upstream_link(session.summarizer)
    api = wire_api(prepared.api, request.url)
    if link is None or api is None:
        return
    session_id, config, priced_as = session.session_id, session.config, prepared.api

    def bill(answer: Answer) -> None:
        charge(bills, session_id, config, priced_as, answer)

    link.remember(UpstreamRequest(api, str(request.url), tuple(request.headers.multi_items()), request.content, bill))


def charge(
    bills: MutableMapping[str, SessionBill], session_id: str, config: Config, api: str | None, answer: Answer
) -> float:
    """Bill one summary request at the client's model's prices (read, written, plain input, output); its
    dollars (0 when no price is known)."""
    pricing = config.cache_pricing(api)
    if pricing is None or answer.prompt_tokens <= 0:
        return 0.0
    read = answer.cache_read_tokens or 0
    if answer.cache_write_tokens is None:  # automatic caching: what was not read was written (or plain input)
        dollars = pricing.prompt_cost(read, answer.prompt_tokens - read)
    else:
        written = answer.cache_write_tokens
        dollars = pricing.prompt_cost(read, written, max(0, answer.prompt_tokens - read - written))
    # One summarizer charge whose input price is this request's average: the bill's summarizer figure and
    # the next request's cost line carry it like any summarizer call's.
    per_token = dollars * MILLION / answer.prompt_tokens
    as_summarizer = pricing.model_copy(update={"summarizer_input": per_token, "summarizer_output": pricing.output})
    bill = bills.setdefault(session_id, SessionBill())
    return bill.add_summarizer(as_summarizer, answer.prompt_tokens, answer.output_tokens)
