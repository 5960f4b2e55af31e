"""Notes on several exchanges from one summary request: the exchanges listed from the request that went
upstream, the answer split into one note per exchange, and a merge's rolling notes assembled from them.

Each summary request re-reads the whole cached conversation, so one request per exchange costs the read
of the prefix once per exchange (measured: as much as not compacting at all, bench_upstream_summary.py).
One request asks instead for a short note on each assistant turn from the one being folded on (at most
``MAX_EXCHANGES``); the later merges of the same fold, and of later folds, find their note ready. A note
is three lines (what was done, what was found, what was left open), written under the exchange's label;
a merge adds its exchange's lines to the rolling notes' sections (the goal kept, the next step replaced),
and the result goes through the same checks as any model summary.

An exchange is known by its key: its first tool call's id, or a digest of its text when it calls none
(the same on the request's side, where the client's spelling is read, and on the session's).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import MARKER_END, Message
from ..redact import redact_text
from .prompts import render
from .sections import Section, clip, parse_sections, render_sections
from .upstream_wire import ANTHROPIC, OPENAI_RESPONSES

MAX_EXCHANGES = 16  # assistant turns one summary request asks notes for
NOTE_TOKENS = 120  # the output bound each note adds, on top of the configured bound's floor
QUOTE_CHARS = 100  # of an exchange's first words, in the instruction
NOTE_FIELDS = ("work done", "findings", "next")
_FIELD = re.compile(r"^\s*[-*]?\s*\**(work done|findings|next)\**\s*:\s*(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Turn:
    """One assistant turn of the request: its key and what names it in the instruction."""

    key: str
    words: str  # its first words (redacted, clipped), or ""
    calls: tuple[str, ...]  # "ID (NAME)" of each tool call


@dataclass(frozen=True)
class Note:
    work: str
    findings: str
    next: str


def text_key(text: str) -> str:
    return "text:" + hashlib.sha256(" ".join(text.split()).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _text(content: Any) -> str:
    """A message's own text: a string, or its text blocks; without a marker the view put in front of it
    (the proxy merges a marker into the assistant message that follows it)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") in ("text", "output_text")]
        text = "\n".join(p for p in parts if isinstance(p, str))
    else:
        return ""
    return text.rsplit(MARKER_END, 1)[1].strip() if MARKER_END in text else text


def session_keys(exchange: Sequence[Message]) -> list[str]:
    """The keys of an exchange's assistant messages (session messages), in order."""
    keys = []
    for message in exchange:
        if message.get("role") != "assistant":
            continue
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict) and c.get("id")]
        text = _text(message.get("content"))
        if calls:
            keys.append(str(calls[0]["id"]))
        elif text.strip():
            keys.append(text_key(text))
    return keys


def request_turns(api: str, body: dict[str, Any]) -> list[Turn]:
    """The assistant turns of a request as it went upstream, in order."""
    if api == OPENAI_RESPONSES:
        return _responses_turns(body.get("input"))
    turns = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if api == ANTHROPIC:
            blocks = content if isinstance(content, list) else []
            calls = [
                (b.get("id"), b.get("name")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
        else:
            raw = message.get("tool_calls") or []
            calls = [(c.get("id"), (c.get("function") or {}).get("name")) for c in raw if isinstance(c, dict)]
        turn = _turn(_text(content), calls)
        if turn is not None:
            turns.append(turn)
    return turns


def _responses_turns(items: Any) -> list[Turn]:
    """Consecutive model items (assistant messages, calls, reasoning) are one turn, as the session holds them."""
    turns: list[Turn] = []
    texts: list[str] = []
    calls: list[tuple[Any, Any]] = []

    def close() -> None:
        turn = _turn("\n".join(t for t in texts if t), calls)
        if turn is not None:
            turns.append(turn)
        texts.clear()
        calls.clear()

    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role == "assistant":
            texts.append(_text(item.get("content")))
        elif kind != "message" and item.get("call_id") and not str(kind).endswith("_output"):
            calls.append((item.get("call_id"), item.get("name")))
        elif kind != "reasoning":
            close()
    close()
    return turns


def _turn(text: str, calls: Sequence[tuple[Any, Any]]) -> Turn | None:
    named = tuple(f"{ident} ({name or 'tool'})" for ident, name in calls if ident)
    if named:
        key = str(next(ident for ident, _ in calls if ident))
    elif text.strip():
        key = text_key(text)
    else:
        return None
    words = clip(redact_text(text), QUOTE_CHARS) if text.strip() else ""
    return Turn(key, words, named)


def describe(turn: Turn) -> str:
    parts = []
    if turn.words:
        parts.append(f"begins “{turn.words}”")
    if turn.calls:
        parts.append(f"calls {', '.join(turn.calls)}")
    return " and ".join(parts)


def instruction(turns: Sequence[Turn], summary: str, max_words: int) -> str:
    """The appended request: a note on each of ``turns`` (labelled E1, E2, ...), with the notes so far."""
    listed = "\n".join(f"E{i}: the assistant turn that {describe(t)}" for i, t in enumerate(turns, 1))
    return redact_text(
        render(
            "upstream_merge.txt",
            exchanges=listed,
            count=len(turns),
            summary=summary.strip() or "(empty: nothing is summarized yet)",
            max_words=max_words,
            common_rules=render("common_rules.md"),
        )
    )


def parse_notes(answer: str, turns: Sequence[Turn]) -> dict[str, Note]:
    """The note of each labelled turn the answer has (a turn without all three lines is left out)."""
    labels = {f"e{i}": turn.key for i, turn in enumerate(turns, 1)}
    notes: dict[str, Note] = {}
    for section in parse_sections(answer):
        key = labels.get(section.name.split(":")[0].strip())
        fields: dict[str, str] = {}
        for item in section.items:
            found = _FIELD.match(item)
            if found:
                fields[found[1].lower()] = found[2].strip()
        if key is not None and all(fields.get(f) for f in NOTE_FIELDS):
            notes[key] = Note(fields["work done"], fields["findings"], fields["next"])
    return notes


def assemble(previous_prose: str, notes: Sequence[Note], goal: str) -> str:
    """The rolling notes after an exchange: the previous ones' sections, its notes' lines added (the goal
    kept when there is one, the next step replaced), in the template's four sections."""
    sections = {s.name: s for s in parse_sections(previous_prose) if s.heading}
    out = []
    for name, heading in (("goal", "Goal"), ("work done", "Work done"), ("findings", "Findings"), ("next", "Next")):
        items = list(sections[name].items) if name in sections else []
        items = [i for i in items if i.strip().lower() not in ("none", "none.")]
        if name == "goal" and not items:
            items = [goal]
        elif name == "work done":
            items += [n.work for n in notes]
        elif name == "findings":
            items += [n.findings for n in notes if n.findings.strip().lower() not in ("none", "none.")]
        elif name == "next":
            items = [notes[-1].next] if notes else items
        out.append(Section(f"### {heading}", items or ["none"]))
    return render_sections(out)
