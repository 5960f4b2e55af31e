"""SWE-agent ``.traj`` files: the ``history`` list, which is what the model saw, taken as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..messages import Message, TranscriptError
from .common import ImportFormat, ImportReport, chat_message, finish, load_json
from .sniffing import key_paths

# Keys of one step of a .traj file's ``trajectory`` (the first keys of the file after ``environment``).
_STEP_KEYS = frozenset(
    {"trajectory[].action", "trajectory[].observation", "trajectory[].response", "trajectory[].thought"}
)


def import_swe_agent(path: Path, **_: Any) -> ImportReport:
    """An SWE-agent ``.traj`` file: its ``history`` (what the model saw), as it is.

    Function-calling runs: ``tool_calls`` kept, a tool message's ``tool_call_ids`` list becomes
    ``tool_call_id`` (its first id; more ids get placeholder results). Text-action runs keep the action
    in the assistant text and observations as user messages. ``is_demo`` messages keep their role and
    content. SWE-agent's own keys (``agent``, ``message_type``, ``thought``, ``action``, ``is_demo``...)
    are dropped; a timestamp, if a message has one, is kept as ``_ts``.
    """
    report = ImportReport("swe-agent", str(path))
    history = _history(path)
    out = [_history_message(h, f"{path}: history[{i}]", report) for i, h in enumerate(history)]
    return finish(report, out)


def _history(path: Path) -> list[Any]:
    """The ``history`` list of a .traj file (``trajectory`` holds per-step notes, not what the model saw)."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise TranscriptError(f"{path}: expected a JSON object with 'history' (an SWE-agent .traj file)")
    history = data.get("history")
    if history is None:
        raise TranscriptError(f"{path}: no 'history' key (keys: {', '.join(sorted(data)) or 'none'})")
    if not isinstance(history, list):
        raise TranscriptError(f"{path}: 'history' must be a list")
    return history


def _history_message(h: Any, where: str, report: ImportReport) -> Message:
    """One history entry as a chat-completions message, SWE-agent's own keys dropped."""
    if not isinstance(h, dict):
        raise TranscriptError(f"{where}: expected a JSON object, got {type(h).__name__}")
    if "role" not in h:
        raise TranscriptError(f"{where}: message has no 'role' (keys: {', '.join(sorted(h)) or 'none'})")
    role = h.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise TranscriptError(f"{where}: unknown role {role!r} (expected system, user, assistant or tool)")
    if h.get("is_demo"):
        report.notes["demo_message"] += 1
    return chat_message(h, role, h.get("content"), _observation_call_id, where, report)


def _observation_call_id(h: dict[str, Any], where: str, report: ImportReport) -> str:
    """The call a tool message answers: function-calling runs list ids; the first one is kept."""
    ids = h.get("tool_call_ids")
    tcid = h.get("tool_call_id")
    if not tcid and isinstance(ids, list) and ids:
        tcid = ids[0]
        if len(ids) > 1:
            report.notes["observation_shared_by_calls"] += 1
    if not tcid:
        raise TranscriptError(f"{where}: tool message without tool_call_id(s)")
    return str(tcid)


def looks_like_swe_agent(head: str) -> bool:
    """A JSON object with a ``history`` list or SWE-agent trajectory steps (not a chat ``messages`` body, nor
    an OpenHands evaluation output, whose ``history`` holds events with a ``source``)."""
    keys = key_paths(head)
    if "messages" in keys or "history[].source" in keys:
        return False
    return "history" in keys or bool(keys & _STEP_KEYS)


FORMAT = ImportFormat(
    name="swe-agent",
    description="an SWE-agent .traj file (its history, what the model saw)",
    importer=import_swe_agent,
    sniff=looks_like_swe_agent,
)
