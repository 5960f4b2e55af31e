"""``recall.py``'s measuring side and its in-process rows: what the model would have seen at each request
under no compaction, Claude Code's own recorded compaction, the library inline at ``serve``'s defaults,
and the two equal-budget baselines (plain truncation, observation masking).

Every row is a list of ``(reply index, prompt messages)``; :class:`Measure` turns one into recall, prompt
sizes (the package's counter, o200k) and stale claims, with per-message figures cached by their content.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcompact.recall import (
    IdentifierReader,
    RecallTotals,
    RequestRecall,
    message_key,
    reply_targets,
    request_recall,
)
from microcompact.recall.stale import StaleClaim, file_events, stale_claims
from microcompact.render import content_text
from microcompact.tokens import TokenCounter

Message = dict[str, Any]
Prompts = Iterable[tuple[int, list[Message]]]
WINDOW = 200_000
PLACEHOLDER = "[output omitted]"


@dataclass
class RowResult:
    """One row of one session: per request, recall and the prompt's tokens; the stale claims seen."""

    name: str
    results: list[RequestRecall] = field(default_factory=list)
    tokens: dict[int, int] = field(default_factory=dict)  # reply index -> the prompt's tokens
    stale: set[tuple[int, str, str]] = field(default_factory=set)  # (event index, path, line), once per row

    @property
    def totals(self) -> RecallTotals:
        return RecallTotals.of(self.results)


class Sizes:
    """Messages' tokens by the package's counter (o200k), cached by content; ``key`` is ``message_key``
    remembered per message object (the rows hand the same dicts over and over)."""

    def __init__(self) -> None:
        self._counter = TokenCounter()
        self._sizes: dict[str, int] = {}
        self._keys: dict[int, tuple[Message, str]] = {}

    def key(self, message: Message) -> str:
        known = self._keys.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        key = message_key(message)
        self._keys[id(message)] = (message, key)
        return key

    def size(self, message: Message) -> int:
        key = self.key(message)
        known = self._sizes.get(key)
        if known is None:
            known = self._sizes[key] = self._counter.count_message(message)
        return known

    def tokens(self, prompt: Sequence[Message]) -> int:
        return sum(self.size(m) for m in prompt)


class Measure(Sizes):
    """One recorded session, measured: its replies' targets, its file events, cached message figures."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__()
        self.messages = messages
        self.read = IdentifierReader(self.key)
        self.targets = reply_targets(messages, self.read)
        self.events = file_events(messages)
        self.recorded = {self.key(m) for m in messages}
        self._texts: dict[str, list[str]] = {}  # role -> its recorded texts, longest first
        for m in messages:
            if text := content_text(m).strip():
                self._texts.setdefault(str(m.get("role")), []).append(text)
        for texts in self._texts.values():
            texts.sort(key=len, reverse=True)
        self._joined: dict[str, bool] = {}
        # an event's call is in view while its call id is (ids survive every wire shape; text may be merged)
        self._calls = [{c.get("id") for c in m.get("tool_calls") or ()} for m in messages]

    def held(self, message: Message) -> bool:
        """Whether the session held ``message``: as recorded, or several of its messages of one role joined
        into one (the Anthropic route merges consecutive user turns, Claude Code's own compaction summary
        among them): verbatim history, never the compactor's text."""
        key = self.key(message)
        if key in self.recorded:
            return True
        if key not in self._joined:
            rest = content_text(message)
            for text in self._texts.get(str(message.get("role")), ()):
                rest = rest.replace(text, "") if text in rest else rest
            self._joined[key] = not rest.strip()
        return self._joined[key]

    def row(self, name: str, prompts: Prompts, summaries: dict[int, str] | None = None) -> RowResult:
        """Measure a row. The compactor's text in a prompt is every message the session never held (a
        marker, a shortened message) plus ``summaries[index]`` (a recorded summary the session holds); a
        file event is folded when no tool call of its message is in the prompt."""
        out = RowResult(name)
        for index, prompt in prompts:
            out.results.append(request_recall(index, self.targets[index], prompt, self.read))
            out.tokens[index] = self.tokens(prompt)
            written = [content_text(m) for m in prompt if not self.held(m)]
            written += [(summaries or {}).get(index, "")]
            shown = {c.get("id") for m in prompt for c in m.get("tool_calls") or ()}
            folded = [e.index for e in self.events if not self._calls[e.index] & shown]
            claims: list[StaleClaim] = stale_claims(self.events, index, "\n".join(written), folded)
            out.stale.update((c.event.index, c.event.path, c.line) for c in claims)
        return out


# --------------------------------------------------------------------------- the recorded rows


def uncompacted(messages: list[Message]) -> Iterator[tuple[int, list[Message]]]:
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            yield i, messages[:i]


def recorded_compaction(messages: list[Message], summaries: Sequence[int]) -> Iterator[tuple[int, list[Message]]]:
    """Claude Code's own: after its summary (a user message at a ``compact_summary_indices`` index), the
    prompt is the summary and what follows it."""
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            start = max((s for s in summaries if s < i), default=0)
            yield i, messages[start:i]


# --------------------------------------------------------------------------- the library, inline


def inline_config(path: Path | None = None) -> Any:
    """``serve``'s config (its defaults over an empty config file, or over ``path``; a 200K window) with inline
    passes and Anthropic's cache prices, as serve on the Anthropic route."""
    from microcompact.server.run import proxy_config

    base = proxy_config(path, WINDOW)
    return base.with_overrides(
        source="bench/recall.py", compression={"micro_compact_background": False}, pricing={"preset": "anthropic"}
    )


def library_inline(messages: list[Message], config: Any) -> Iterator[tuple[int, list[Message]]]:
    """A ``Session`` fed the session message by message; before each reply ``before_request`` and the
    session's messages are the prompt. Each answer reports usage as a prefix cache would (the prefix shared
    with the previous prompt read, the rest written), and a person's message ends the turn after it."""
    from microcompact.session import Session

    session = Session(config)
    counter = Sizes()
    previous: list[str] = []
    taken = 0
    try:
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            new = messages[taken:i]
            human = taken > 0 and any(x.get("role") == "user" for x in new)
            session.extend(dict(x) for x in new)
            session.before_request()
            counted = session.tokens
            prompt = session.messages
            keys = [message_key(x) for x in prompt]
            shared = next((k for k, (a, b) in enumerate(zip(previous, keys, strict=False)) if a != b), None)
            if shared is not None or len(keys) < len(previous):
                session.cache.note_fold()
            prefix = min(len(previous), len(keys)) if shared is None else shared
            total = counter.tokens(prompt)
            read = counter.tokens(prompt[:prefix])
            yield i, prompt
            session.record_usage(total, counted, cache_read_tokens=read, cache_write_tokens=total - read)
            session.append(dict(m))
            taken = i + 1
            previous = [*keys, message_key(m)]
            if human:
                session.finalize_turn()
    finally:
        session.close()


# --------------------------------------------------------------------------- the equal-budget baselines


def _head_end(messages: Sequence[Message]) -> int:
    """The head: system messages and the first user message."""
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            return i + 1
    return 0


def truncated(measure: Measure, index: int, budget: int) -> list[Message]:
    """Plain truncation of ``messages[:index]`` to ``budget`` tokens: the head, then the newest messages
    that fit, starting at no tool result (a call is never split from its result)."""
    return _newest(measure, measure.messages[:index], budget)


def _newest(measure: Measure, prompt: list[Message], budget: int) -> list[Message]:
    head = _head_end(prompt)
    room = budget - measure.tokens(prompt[:head])
    used, best = 0, len(prompt)
    for start in range(len(prompt) - 1, head - 1, -1):
        used += measure.size(prompt[start])
        if used > room:
            break
        if prompt[start].get("role") != "tool":
            best = start
    return prompt[:head] + prompt[best:]


def masked(measure: Measure, index: int, budget: int) -> list[Message]:
    """Observation masking of ``messages[:index]`` to ``budget``: tool results replaced by a placeholder,
    oldest first, until the prompt fits; the newest are kept. If masking all is not enough, the masked
    prompt is truncated as above."""
    prompt = measure.messages[:index]
    total = measure.tokens(prompt)
    out = list(prompt)
    for k, m in enumerate(prompt):
        if total <= budget:
            return out
        if m.get("role") == "tool":
            stub = {**m, "content": PLACEHOLDER}
            total += measure.size(stub) - measure.size(m)
            out[k] = stub
    return out if total <= budget else _newest(measure, out, budget)


def at_budget(measure: Measure, budgets: dict[int, int], cut: Any) -> Iterator[tuple[int, list[Message]]]:
    """A baseline's prompts: ``cut(measure, index, budget)`` at each request another row measured."""
    for index in sorted(budgets):
        yield index, cut(measure, index, budgets[index])
