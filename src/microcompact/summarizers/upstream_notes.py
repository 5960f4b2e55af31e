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
(the same on the request's side, where the client's spelling is read, and on the session's). Gemini
calls carry no id unless the client set one, and the session's ``call-I-J`` names count contents of the
client's history, which a fold shortens in what goes up: a call named so is known instead by a digest of
its turn (its text, each call's name and arguments), which a fold leaves as it was. A Gemini model content
is one turn, as it is one assistant message of the session; the marker's part is not part of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..messages import MARKER_END, MARKER_PREFIX, Message
from ..redact import redact_text
from ..wire import WireApi
from .prompts import render
from .sections import Section, clip, parse_sections, render_sections

MAX_EXCHANGES = 16  # assistant turns one summary request asks notes for
NOTE_TOKENS = 120  # the output bound each note adds, on top of the configured bound's floor
QUOTE_CHARS = 100  # of an exchange's first words, in the instruction
NOTE_FIELDS = ("work done", "findings", "next")
ARGS_CHARS = 60  # of a nameless call's arguments, in the instruction
# The names server/gemini_format gives calls the client sent without an ``id`` (content I, call J).
GENERATED_ID = re.compile(r"call-\d+(-\d+)?")
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


def _arguments(arguments: Any) -> Any:
    """A session call's arguments as the object Gemini's ``args`` holds (as gemini_format renders them)."""
    try:
        return json.loads(arguments) if isinstance(arguments, str) else {}
    except ValueError:
        return {"arguments": arguments}


def _chat_calls(tool_calls: Any) -> list[tuple[Any, Any, Any]]:
    """``(id, name, arguments object)`` of Chat Completions ``tool_calls`` (the session's spelling too)."""
    calls = []
    for call in tool_calls if isinstance(tool_calls, list) else []:
        if isinstance(call, dict):
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            calls.append((call.get("id"), function.get("name"), _arguments(function.get("arguments"))))
    return calls


def turn_key(text: str, calls: Sequence[tuple[Any, Any, Any]]) -> str | None:
    """An assistant turn's key from its text and its calls ``(id, name, arguments object)``: the first
    call's id; a digest of the whole turn when that id is one the proxy made up; a digest of the text when
    it calls nothing; None when it has neither."""
    named = [c for c in calls if c[0]]
    if named and not GENERATED_ID.fullmatch(str(named[0][0])):
        return str(named[0][0])
    if calls:
        shape = [" ".join(text.split()), [[str(name or ""), args] for _, name, args in calls]]
        digest = json.dumps(shape, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return "turn:" + hashlib.sha256(digest).hexdigest()[:16]
    return text_key(text) if text.strip() else None


def session_keys(exchange: Sequence[Message]) -> list[str]:
    """The keys of an exchange's assistant messages (session messages), in order."""
    keys = []
    for message in exchange:
        if message.get("role") != "assistant":
            continue
        key = turn_key(_text(message.get("content")), _chat_calls(message.get("tool_calls")))
        if key is not None:
            keys.append(key)
    return keys


def request_turns(api: WireApi, body: dict[str, Any]) -> list[Turn]:
    """The assistant turns of a request as it went upstream, in order."""
    return _TURNS[api](body)


def _message_turns(body: dict[str, Any], anthropic: bool) -> list[Turn]:
    """The turns of a ``messages`` body: Anthropic's calls are ``tool_use`` blocks, Chat's ``tool_calls``."""
    turns = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if anthropic:
            blocks = content if isinstance(content, list) else []
            calls = [
                (b.get("id"), b.get("name"), b.get("input"))
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
        else:
            calls = _chat_calls(message.get("tool_calls"))
        turn = _turn(_text(content), calls)
        if turn is not None:
            turns.append(turn)
    return turns


def _responses_turns(items: Any) -> list[Turn]:
    """Consecutive model items (assistant messages, calls, reasoning) are one turn, as the session holds them."""
    turns: list[Turn] = []
    texts: list[str] = []
    calls: list[tuple[Any, Any, Any]] = []

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
            calls.append((item.get("call_id"), item.get("name"), _arguments(item.get("arguments"))))
        elif kind != "reasoning":
            close()
    close()
    return turns


def _gemini_turns(contents: Any) -> list[Turn]:
    """Each model content is one turn: its visible text parts (not ``thought`` parts, not the marker's part
    the view merged into it) and its functionCall parts, as gemini_format makes one assistant message."""
    turns = []
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        texts = [
            p["text"]
            for p in parts
            if isinstance(p.get("text"), str) and p["text"] and not p.get("thought") and not _is_marker(p["text"])
        ]
        functions = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)]
        calls = [(f.get("id"), f.get("name"), f.get("args", {})) for f in functions]
        turn = _turn(_text("\n".join(texts)), calls)
        if turn is not None:
            turns.append(turn)
    return turns


def _is_marker(text: str) -> bool:
    return text.startswith(MARKER_PREFIX)


def _turn(text: str, calls: Sequence[tuple[Any, Any, Any]]) -> Turn | None:
    key = turn_key(text, calls)
    if key is None:
        return None
    named = tuple(_call_name(ident, name, args) for ident, name, args in calls if ident or key.startswith("turn:"))
    words = clip(redact_text(text), QUOTE_CHARS) if text.strip() else ""
    return Turn(key, words, named)


def _call_name(ident: Any, name: Any, args: Any) -> str:
    """A call as the instruction names it: its id and tool, or (an id the model never saw) its tool and
    the start of its arguments."""
    if ident and not GENERATED_ID.fullmatch(str(ident)):
        return f"{ident} ({name or 'tool'})"
    shown = clip(redact_text(json.dumps(args, ensure_ascii=False)), ARGS_CHARS)
    return f"{name or 'tool'} {shown}"


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


# Each wire API's assistant turns (the summary wire: upstream_wire.WIRES).
_TURNS: dict[WireApi, Callable[[dict[str, Any]], list[Turn]]] = {
    WireApi.CHAT: lambda body: _message_turns(body, anthropic=False),
    WireApi.RESPONSES: lambda body: _responses_turns(body.get("input")),
    WireApi.MESSAGES: lambda body: _message_turns(body, anthropic=True),
    WireApi.GEMINI: lambda body: _gemini_turns(body.get("contents")),
}
