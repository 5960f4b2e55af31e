"""Deterministic, offline summaries built from what an exchange plainly shows (no model)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message, content_text
from ..tokens import EstimateCounter
from .base import BATCH_SECTIONS, MICRO_SECTIONS, CountText
from .facts import compress_facts, extract_facts, ledger_budget, merge_into, render_facts, with_facts
from .facts_extract import (
    ERROR_RESULT,
    PATH_KEYS,
    PATTERN_KEYS,
    SHELL_KEYS,
    URL_KEYS,
    Call,
    exit_code,
    first_arg,
    parse_call,
    run_counts,
    shell_command,
)
from .facts_model import SUBJECT_CHARS, one_line
from .findings import ITEM_CHARS, has_reason, reported_findings, requirements, users_own
from .provenance import OUTPUT, REPLIED, attributed, flagged, sentence_case, tainted_from
from .sections import Section, clip, parse_sections, render_sections
from .validation import shorten_summary

_OUTCOME_CHARS = 100
_PROMPT = re.compile(r"^\s*\S{0,40}[$#>]\s*$")  # a shell prompt echoed at the end of an output ("bash-$")
# Sections replaced, not merged: "where the work stands" is about the newest span only.
_REPLACED = ("Active state",)
# Sections the ledger (files, failing commands, test runs) stands in for in a batch summary.
_LEDGER_STAND_INS = ("Relevant files", "Blocked (exact errors)")


@dataclass
class _Notes:
    """What an exchange says besides its facts (files, failures, tests): prose and commands."""

    requests: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # commands that worked, with their last line


class ExtractiveSummarizer:
    """Deterministic, offline summaries built from what an exchange plainly shows.

    The facts (a file ledger, failing commands with their error line, test runs as counts) are kept by
    :mod:`.facts`: merged pass by pass, compressed to ``ledger_budget_tokens`` but never forgetting a
    changed file. Beside them: findings from the assistant's prose (conclusions, causes, decisions,
    constraints; never narration such as "Let me ..."), requirements the user stated, open questions and
    the commands that worked. Each prose section keeps its newest ``max_items`` bullets, so the summary
    stays bounded however long the session runs. Same input, same output.
    """

    name = "extractive"

    def __init__(
        self,
        count_text: CountText | None = None,
        max_items: int = 10,
        ledger_budget_tokens: int | None = None,
    ) -> None:
        self.count_text = count_text or EstimateCounter().count
        self.max_items = max_items
        self.ledger_budget_tokens = ledger_budget_tokens or ledger_budget(2000)

    def merge(self, summary: str, exchange: list[dict[str, Any]]) -> str:
        notes, facts = _read(exchange), extract_facts(exchange)
        new = {
            "Requirements": notes.requirements,
            "Findings": notes.findings,
            "Open questions": notes.questions,
            "Commands and results": notes.commands,
        }
        if not any(new.values()) and not facts:
            # Nothing structured to extract (a plain answer): record that the turn was answered, so the
            # exchange can still be folded in instead of failing as "empty".
            new["Answers"] = [_answer_line(exchange)]
        return self._with_ledger(summary, self._update(summary, new, MICRO_SECTIONS), facts)

    def condense(self, summary: str, target_tokens: int) -> str:
        return shorten_summary(summary, target_tokens, self.count_text)

    def batch(self, summary: str, messages: list[dict[str, Any]], focus: str | None = None) -> str:
        notes, facts = _read(messages), extract_facts(messages)
        new = {
            "Goal": notes.requests,
            "Constraints and preferences": notes.requirements,
            "Completed actions": [f"Ran {command.split(' → ')[0]}" for command in notes.commands],
            "Active state": _active_state(notes),
            "Key decisions (with reasons)": [f for f in notes.findings if has_reason(f)],
            "Open questions": notes.questions,
        }
        if not any(new.values()) and not facts and not summary.strip():
            # Nothing extractable (plain prose): still a usable summary, so batch compaction can go on.
            new["Completed actions"] = [_answer_line(messages)]
        order = tuple(s for s in BATCH_SECTIONS if s not in _LEDGER_STAND_INS)
        return self._with_ledger(summary, self._update(summary, new, order, focus=focus), facts)

    def _with_ledger(self, previous: str, prose: str, facts: Any) -> str:
        """``prose`` followed by the ledger of ``previous`` updated with ``facts``, within its budget."""
        merged = merge_into(previous, facts)
        block = render_facts(compress_facts(merged, self.ledger_budget_tokens, self.count_text))
        return with_facts(prose, block)

    def _update(
        self,
        summary: str,
        new: dict[str, list[str]],
        order: tuple[str, ...],
        *,
        focus: str | None = None,
    ) -> str:
        """The prose of ``summary`` with ``new`` bullets merged into its sections (created as needed, in
        ``order``); sections left without bullets are dropped."""
        sections = parse_sections(with_facts(summary, ""))
        by_name = {s.name: s for s in sections}
        terms = _focus_terms(focus)
        for title, items in new.items():
            if not items:
                continue
            section = by_name.get(title.lower())
            if section is None:
                section = by_name[title.lower()] = Section(f"### {title}")
                sections.append(section)
            items = [clip(item, ITEM_CHARS) for item in items]
            if title not in _REPLACED:
                items = _merge_items(section.items, items)
            section.items = _keep_newest(items, self.max_items, terms)
        rank = {title.lower(): i for i, title in enumerate(order)}
        sections = [s for s in sections if s.items]
        sections.sort(key=lambda s: rank.get(s.name, -1 if not s.heading else len(order)))
        return render_sections(sections)


def _read(messages: Iterable[Message]) -> _Notes:
    notes = _Notes()
    calls: dict[str, Call] = {}
    for message in messages:
        role = message.get("role")
        text = content_text(message)
        if role == "user":
            if users_own(text).strip():
                notes.requests.append(clip(users_own(text), ITEM_CHARS))
            notes.requirements += requirements(text)
        elif role == "assistant":
            found, asked = reported_findings(text)
            notes.findings += found
            notes.questions += asked
            for raw in message.get("tool_calls") or ():
                calls[str(raw.get("id"))] = parse_call(raw)
        elif role == "tool":
            call = calls.get(str(message.get("tool_call_id")))
            command = shell_command(call) if call is not None else None
            if command is not None:
                _read_command(notes, command, text)
    return notes


def _read_command(notes: _Notes, command: str, result: str) -> None:
    """A command that worked (failures and test runs are facts, kept by the ledger)."""
    code = exit_code(result)
    if ERROR_RESULT.match(result) or (code is not None and code != 0) or run_counts(command, result) is not None:
        return
    last = next((line for line in reversed(result.splitlines()) if line.strip() and not _PROMPT.match(line)), "")
    outcome = clip(last, _OUTCOME_CHARS) if last else "no output"
    if last and (flagged(last) or tainted_from(result) < len(result)):
        outcome = attributed(OUTPUT, last, _OUTCOME_CHARS)  # never an order in our own words
    notes.commands.append(f"`{one_line(command, SUBJECT_CHARS)}` → {outcome}")


def _answer_line(exchange: list[dict[str, Any]]) -> str:
    """The gist of the last assistant text in ``exchange`` (or that it replied with no text)."""
    for message in reversed(exchange):
        if message.get("role") == "assistant":
            text = " ".join(content_text(message).split())
            if text and (flagged(text) or tainted_from(text) < len(text)):
                return sentence_case(attributed(REPLIED, text, ITEM_CHARS))
            if text:
                return f"Replied: {clip(text, ITEM_CHARS)}"
    return "Replied without text"


def _merge_items(old: list[str], new: list[str]) -> list[str]:
    """Old bullets then new ones; a bullet seen again moves to the end."""
    merged = {" ".join(item.lower().split()): item for item in old}
    for item in new:
        key = " ".join(item.lower().split())
        merged.pop(key, None)
        merged[key] = item
    return list(merged.values())


def _keep_newest(items: list[str], limit: int, terms: list[str]) -> list[str]:
    """The newest ``limit`` items in order; items mentioning a focus term are kept first."""
    if len(items) <= limit:
        return items
    favoured = set([i for i, item in enumerate(items) if _mentions(item, terms)][-limit:])
    others = [i for i in range(len(items)) if i not in favoured]
    room = limit - len(favoured)
    kept = favoured | set(others[len(others) - room :] if room else ())
    return [items[i] for i in sorted(kept)]


def _focus_terms(focus: str | None) -> list[str]:
    return re.findall(r"[\w./-]{3,}", focus.lower()) if focus else []


def _mentions(item: str, terms: list[str]) -> bool:
    lowered = item.lower()
    return any(term in lowered for term in terms)


def _active_state(notes: _Notes) -> list[str]:
    """Where the work stands at the end of the span: the last finding and the last command that worked."""
    state = []
    if notes.findings:
        state.append(f"Last finding: {notes.findings[-1]}")
    if notes.commands:
        state.append(f"Last command: {notes.commands[-1]}")
    return state


def describe_tool_result(call: dict[str, Any] | None, result: str) -> str:
    """A one-line stand-in for a tool output: tool, target, size and exit status.

    E.g. ``[read_file] src/app.py (412 lines)`` or ``[Bash] `pytest -x` (38 lines, exit 1)``. Batch
    compaction's cheap phase puts these where old outputs were; the originals stay in the store.
    """
    parsed = parse_call(call) if call else Call("tool", {})
    target = (
        first_arg(parsed.args, PATH_KEYS)
        or first_arg(parsed.args, SHELL_KEYS)
        or first_arg(parsed.args, PATTERN_KEYS + URL_KEYS)
    )
    lines = len(result.splitlines())
    facts = [f"{lines} line{'s' if lines != 1 else ''}" if lines > 1 else f"{len(result)} chars"]
    code = exit_code(result)
    if code is not None:
        facts.append(f"exit {code}")
    elif ERROR_RESULT.match(result):
        facts.append("error")
    where = f" {clip(target.splitlines()[0], SUBJECT_CHARS)}" if target else ""
    return f"[{parsed.name}]{where} ({', '.join(facts)})"
