"""Thinking blocks bound to their prefix: a fold never sends a block the upstream will refuse.

On Anthropic's newest models ("preserved thinking": the families in ``config.PRESERVED_THINKING_FAMILIES``)
a ``thinking`` or ``redacted_thinking`` block is valid only while its prefix (top-level ``system``, ``tools``
and everything before the block) is what the upstream saw when it produced the block. A fold is an edit of
that prefix, so the blocks after it would be refused with a 400 ("... bound to a different conversation").
The docs name the edits that keep blocks valid: appending, moving ``cache_control``, removing thinking
blocks (from the start, from the end, or all of them).

So for each request the proxy changed (its view differs from the client's history), a block is *stale*
when it sits at or after the first changed position and is not the client's own message right after a
prefix this process sent upstream as a whole request (a block produced since the last fold, against the
compacted view, stays valid: the reply to a request is bound to that request). Prefixes are compared as
the upstream compares them: no ``cache_control``, no thinking blocks, consecutive turns of one role read
as one. Then, per model family (``thinking`` in the config):

- ``remove`` (the default for those families; valid on every account): every thinking block up to the
  last stale one is removed, so what is left is a run of blocks at the end (blocks are never left out
  between others); an assistant message left with nothing is not sent, and its neighbours join;
- ``drop_block``: the blocks are left and the request asks the API to drop the stale ones
  (``thinking.block_binding.prefix_mismatch_behavior``, with the beta value merged into the client's own
  ``anthropic-beta``); the API then drops the stale block and every later one;
- ``keep``: blocks go as sent (models with no prefix binding).

Requests forwarded unchanged keep every block. Only thinking is removed, so a ``tool_use`` keeps its
``tool_result`` and the last assistant turn keeps its text and calls.

A binding refusal that still comes back (an unknown model, a new rule) is the proxy's to fix
(:meth:`ThinkingPlan.retries`): once more with all thinking removed from the changed part, then the
client's own request as it came. A conversation that carries a provider-side ``compaction`` block is
left to the provider (:meth:`ThinkingGuard.aside`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..config import ThinkingConfig, ThinkingMode
from ..messages import Message
from ..telemetry import emit
from .anthropic_format import THINKING_BLOCKS, AnthropicFormat
from .metrics import Metrics
from .provider import Provider, stripped

log = logging.getLogger("microcompact")

BINDING_BETA = "thinking-binding-controls-2026-08-01"
PROVIDER_COMPACTION_BETAS = ("compact-2026-01-12", "compact-2026-09-04")
# The part of the API's 400 message that names a broken binding.
BINDING_REFUSAL = "bound to a different conversation"
REMOVED_HEADER = "x-microcompact-thinking-removed"
DROPPED_HEADER = "x-microcompact-thinking-dropped"
RETRY_HEADER = "x-microcompact-thinking-retry"
PROVIDER_COMPACTION_HEADER = "x-microcompact-provider-compaction"
MEMORY_PREFIXES = 50_000  # prefixes sent upstream that this process remembers (32-character digests)
# claude-FAMILY-MAJOR[-MINOR][-DATE]: the family is "FAMILY-MAJOR[-MINOR]".
_FAMILY = re.compile(r"claude-([a-z]+-\d{1,2}(?:-\d{1,2})?)(?!\d)")
_NORMALIZE = AnthropicFormat().normalize

Dump = Callable[[dict[str, Any], list[Message]], bytes]


def family_of(model: Any) -> str | None:
    found = _FAMILY.match(model) if isinstance(model, str) else None
    return found.group(1) if found else None


def is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in THINKING_BLOCKS


def thinking_count(message: Any) -> int:
    content = message.get("content") if isinstance(message, dict) else None
    return sum(1 for b in content if is_thinking(b)) if isinstance(content, list) else 0


def binding_units(message: Any) -> list[Any]:
    """What a message adds to the prefix a later block is bound to: its role with each block that is not
    thinking, breakpoints removed (a string content is one text block; other fields come first)."""
    if not isinstance(message, dict):
        return [message]
    role, content = message.get("role"), message.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        blocks = [b for b in content if not is_thinking(b)]
    else:
        blocks = [] if content is None else [content]
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}
    units: list[Any] = [[role, "fields", stripped(extra)]] if extra else []
    return units + [[role, stripped(b)] for b in blocks]


def _dump(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # integers beyond 64 bits, lone surrogates
        return json.dumps(value, sort_keys=True, ensure_ascii=True).encode()


def prefix_digests(body: dict[str, Any], messages: Sequence[Any]) -> list[str]:
    """``[d0, d1, ...]``: ``d[i]`` is the digest of the prefix of ``messages[i]`` (system, tools and
    ``messages[:i]`` in binding form); the last one is the whole request's."""
    running = hashlib.sha256(_dump([stripped(body.get("system")), stripped(body.get("tools"))]))
    out = [running.hexdigest()[:32]]
    for message in messages:
        for unit in binding_units(message):
            running.update(_dump(unit) + b"\0")
        out.append(running.hexdigest()[:32])
    return out


def first_change(history: Sequence[Any], outgoing: Sequence[Any]) -> int:
    """The first position where ``outgoing`` differs from ``history`` (moving ``cache_control`` is no change)."""
    for i, (a, b) in enumerate(zip(history, outgoing, strict=False)):
        if a is not b and stripped(a) != stripped(b):
            return i
    return min(len(history), len(outgoing))


def without_thinking(messages: Sequence[Message], upto: int, start: int = 0) -> tuple[list[Message], int]:
    """``messages`` with the thinking blocks of ``messages[start:upto + 1]`` removed, and how many went; an
    assistant message left empty is not sent, and the turns around it join."""
    out: list[Message] = []
    removed = 0
    for i, message in enumerate(messages):
        count = thinking_count(message) if start <= i <= upto else 0
        if not count:
            out.append(message)
            continue
        removed += count
        kept = [b for b in message["content"] if not is_thinking(b)]
        if kept or message.get("role") != "assistant":
            out.append({**message, "content": kept})
    return (_NORMALIZE({}, out) if len(out) < len(messages) else out), removed


def is_binding_refusal(status: int, body: bytes) -> bool:
    return status == 400 and BINDING_REFUSAL.encode() in body and b"signature" in body


def merged_beta(headers: list[tuple[str, str]], value: str) -> list[tuple[str, str]]:
    """``headers`` with ``value`` added to the client's own ``anthropic-beta`` (never replacing it)."""
    out: list[tuple[str, str]] = []
    values: list[str] = []
    for name, given in headers:
        if name.lower() == "anthropic-beta":
            values += [v.strip() for v in given.split(",") if v.strip()]
        else:
            out.append((name, given))
    if value not in values:
        values.append(value)
    return [*out, ("anthropic-beta", ",".join(values))]


@dataclass
class Attempt:
    """One body the proxy may send upstream for a request."""

    label: str  # "first", "stripped" (all thinking removed from the changed part) or "client" (as it came)
    content: bytes
    messages: Sequence[Any]  # what goes upstream (its prefix is remembered when answered)
    beta: bool = False  # merge BINDING_BETA into anthropic-beta
    removed: int = 0
    dropped: int = 0


@dataclass
class ThinkingPlan:
    """What to send for one request, and what to send instead when the upstream refuses a binding."""

    guard: ThinkingGuard
    key: str
    body: dict[str, Any]
    history: list[Message]
    raw: bytes
    first: Attempt
    changed_from: int | None  # the first changed position, None when the request goes as it came
    dump: Dump
    count: bool = False  # a count_tokens request: nothing counted, and its answer binds no reply
    current: Attempt = field(init=False)
    headers: dict[str, str] = field(default_factory=dict)  # response headers this plan adds

    def __post_init__(self) -> None:
        self.current = self.first
        if not self.count:
            self.headers.update(self.guard.counted(self.key, self.first))

    @property
    def fell_back(self) -> bool:
        """The client's own request went up instead of the compacted view."""
        return self.current.label == "client"

    def retries(self) -> Iterator[Attempt]:
        """The bodies to try after a binding refusal of the one before, in order (none when the request
        went as it came: that refusal is the client's)."""
        if self.changed_from is None:
            return
        messages, removed = without_thinking(self.first.messages, len(self.first.messages), self.changed_from)
        if removed:
            yield self._now(Attempt("stripped", self.dump(self.body, messages), messages))
        yield self._now(Attempt("client", self.raw, self.history))

    def _now(self, attempt: Attempt) -> Attempt:
        self.current = attempt
        self.guard.retrying(self.key, attempt, self.count)
        self.headers[RETRY_HEADER] = attempt.label
        return attempt

    def upstream_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return merged_beta(headers, BINDING_BETA) if self.current.beta else headers

    def answered(self, status: int) -> None:
        """The upstream answered ``status`` to the current attempt: a success binds its reply to its prefix."""
        if status < 400 and not self.count:
            self.guard.remember(self.body, self.current.messages)


class ThinkingGuard:
    """The proxy's thinking policy and memory (the prefixes it sent upstream), shared by all requests."""

    def __init__(self, config: ThinkingConfig, metrics: Metrics, memory: int = MEMORY_PREFIXES) -> None:
        self.config = config
        self.metrics = metrics
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._limit = memory
        self._lock = threading.Lock()
        self._sessions: dict[str, Counter[str]] = {}

    def mode_for(self, model: Any) -> ThinkingMode:
        family = family_of(model)
        if family is None:
            return self.config.other
        return self.config.families.get(family, self.config.other)

    # ------------------------------------------------------------------ provider-side compaction

    def aside(self, provider: Provider, body: dict[str, Any]) -> dict[str, str] | None:
        """The response headers of a request left to the provider's own compaction (a ``compaction`` block
        in ``messages``: the provider manages that history; it is forwarded as it came), else None."""
        if not provider.binds_thinking:
            return None
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "compaction" for b in content
            ):
                self.metrics.thinking_event("provider_compaction_stepped_aside")
                return {PROVIDER_COMPACTION_HEADER: "stepped-aside"}
        return None

    # ------------------------------------------------------------------ the plan

    def plan(
        self,
        provider: Provider,
        key: str,
        body: dict[str, Any],
        history: list[Message],
        outgoing: list[Message],
        raw: bytes,
        dump: Dump,
        count: bool = False,
    ) -> ThinkingPlan:
        """What to send for a request whose compacted messages are ``outgoing`` (``history`` itself when
        the proxy changed nothing); ``count``: a count_tokens request (the same blocks go, nothing counted)."""
        if _same(history, outgoing):
            return ThinkingPlan(self, key, body, history, raw, Attempt("first", raw, history), None, dump, count)
        mode = self.mode_for(body.get("model")) if provider.binds_thinking else "keep"
        changed = first_change(history, outgoing)
        stale = self._stale(body, history, outgoing, changed) if mode != "keep" else []
        first = self._first(mode, body, outgoing, stale, dump)
        changed_from = changed if provider.binds_thinking else None
        return ThinkingPlan(self, key, body, history, raw, first, changed_from, dump, count)

    def _stale(self, body: dict[str, Any], history: list[Message], outgoing: list[Message], changed: int) -> list[int]:
        """Positions of the messages whose thinking the upstream would refuse: from the first change on,
        each one that is not the client's own message right after a prefix this process sent and had
        answered (the reply to that request, which the client appended; a merged or rebuilt message, or one
        that a fold moved, is never that)."""
        digests = prefix_digests(body, outgoing)
        own = {id(m) for m in history}
        return [
            i
            for i in range(changed, len(outgoing))
            if thinking_count(outgoing[i]) and not (id(outgoing[i]) in own and self._known(digests[i]))
        ]

    def _first(
        self, mode: ThinkingMode, body: dict[str, Any], outgoing: list[Message], stale: list[int], dump: Dump
    ) -> Attempt:
        if not stale:
            return Attempt("first", dump(body, outgoing), outgoing)
        if mode == "remove":
            messages, removed = without_thinking(outgoing, max(stale))
            return Attempt("first", dump(body, messages), messages, removed=removed)
        dropped = sum(thinking_count(m) for m in outgoing[min(stale) :])
        return Attempt("first", dump(_asking_drop(body), outgoing), outgoing, beta=True, dropped=dropped)

    # ------------------------------------------------------------------ memory and counts

    def remember(self, body: dict[str, Any], messages: Sequence[Any]) -> None:
        """A request with these messages was answered: its reply's blocks are bound to this prefix."""
        if self.mode_for(body.get("model")) == "keep":
            return
        digest = prefix_digests(body, messages)[-1]
        with self._lock:
            self._sent[digest] = None
            self._sent.move_to_end(digest)
            while len(self._sent) > self._limit:
                self._sent.popitem(last=False)

    def _known(self, digest: str) -> bool:
        with self._lock:
            return digest in self._sent

    def counted(self, key: str, attempt: Attempt) -> dict[str, str]:
        """Count the blocks ``attempt`` removes or leaves to drop; its response headers."""
        if not attempt.removed and not attempt.dropped:
            return {}
        kind, n = ("removed", attempt.removed) if attempt.removed else ("dropped", attempt.dropped)
        self.metrics.thinking_event(f"blocks_{kind}", n)
        totals = self._session(key, f"blocks_{kind}", n)
        emit("thinking", {"event": "thinking_blocks", "session_key": key, kind: n, f"{kind}_total": totals})
        return {REMOVED_HEADER if kind == "removed" else DROPPED_HEADER: str(n)}

    def retrying(self, key: str, attempt: Attempt, count: bool = False) -> None:
        if count:
            return
        self.metrics.thinking_event(f"refusals_retried_{attempt.label}")
        total = self._session(key, "refusals_retried", 1)
        log.warning(
            "Proxy: the upstream refused a thinking block the proxy's fold left in session %s; sending %s",
            key,
            "it with thinking removed from the changed part" if attempt.label == "stripped" else "the client's own",
        )
        record = {"event": "thinking_refusal_retried", "session_key": key, "retry": attempt.label}
        emit("thinking", {**record, "refusals_retried_total": total})

    def _session(self, key: str, name: str, n: int) -> int:
        with self._lock:
            counts = self._sessions.setdefault(key, Counter())
            counts[name] += n
            return counts[name]

    def session_counts(self, key: str) -> dict[str, int]:
        with self._lock:
            return dict(self._sessions.get(key, Counter()))


def _same(history: Sequence[Any], outgoing: Sequence[Any]) -> bool:
    return len(history) == len(outgoing) and all(a is b for a, b in zip(history, outgoing, strict=True))


def _asking_drop(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking the API to drop stale blocks (the client's own thinking settings kept)."""
    thinking = body.get("thinking")
    settings = dict(thinking) if isinstance(thinking, dict) else {"type": "adaptive"}
    binding = settings.get("block_binding")
    settings["block_binding"] = {
        **(binding if isinstance(binding, dict) else {}),
        "prefix_mismatch_behavior": "drop_block",
    }
    return {**body, "thinking": settings}


__all__ = [
    "BINDING_BETA",
    "PROVIDER_COMPACTION_BETAS",
    "Attempt",
    "ThinkingGuard",
    "ThinkingPlan",
    "binding_units",
    "family_of",
    "first_change",
    "is_binding_refusal",
    "merged_beta",
    "prefix_digests",
    "without_thinking",
]
