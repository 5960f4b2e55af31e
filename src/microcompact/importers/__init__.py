"""Convert recorded sessions of common agents into the chat-completions JSONL ``replay`` reads.

``import_transcript(path, fmt)`` returns the messages; ``import_report(path, fmt)`` returns an
:class:`ImportReport` with the messages plus what the conversion skipped (``notes``) and what it had to
change to make the transcript valid (``repairs``). ``write_jsonl`` writes messages one per line.

Formats, one module each, registered in :data:`REGISTRY` (``FORMATS`` maps their names to importers):

* ``claude-code``: a Claude Code session log (``~/.claude/projects/*/<session>.jsonl`` or a subagent's
  ``agent-*.jsonl``).
* ``swe-agent``: an SWE-agent ``.traj`` file (its ``history``, what the model saw).
* ``adp``: an agent-data-protocol raw sample file (a JSON array of records: SWE-smith, SWE-Play/OpenHands
  ``messages`` lists, nebius ``trajectory`` lists of ``{role: system/user/ai, text}``).
* ``codex``: a Codex CLI rollout (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).
* ``openhands``: an OpenHands trajectory (a JSON array of events, or an evaluation output's ``history``).
* ``goose``: a goose session file (JSONL: a metadata line, then one message per line).
* ``aider``: an aider chat history (``.aider.chat.history.md``, every session in it).
* ``openai``: chat-completions messages already (JSONL, a JSON array, or an object with ``messages``).

:func:`detect_format` asks each format's ``sniff`` about the start of a file (``import --from auto``).

Every output passes :func:`microcompact.contract.role_sequence_errors` (which includes tool pairing):
tool results whose call is missing are dropped, calls without a result get a ``[no result recorded]``
placeholder, system messages after the conversation started become user messages; each repair is counted.
Timestamps, where the source has them, are kept as ``_ts`` (float seconds since the epoch).
"""

from __future__ import annotations

from . import adp, aider, claude_code, codex, goose, openai, openhands, swe_agent
from .command import run_import
from .common import (
    NO_RESULT,
    TS_KEY,
    Importer,
    ImportFormat,
    ImportReport,
    repair,
    to_epoch,
    write_jsonl,
)
from .registry import (
    AUTO,
    FORMATS,
    REGISTRY,
    detect_format,
    import_report,
    import_transcript,
    is_auto,
    register,
    resolve_format,
)

__all__ = [
    "AUTO",
    "FORMATS",
    "NO_RESULT",
    "REGISTRY",
    "TS_KEY",
    "ImportFormat",
    "ImportReport",
    "Importer",
    "detect_format",
    "import_report",
    "import_transcript",
    "is_auto",
    "register",
    "repair",
    "resolve_format",
    "run_import",
    "to_epoch",
    "write_jsonl",
]

# Detection order: specific shapes first (openhands before swe-agent: both may hold a ``history`` list);
# openai (any chat message) is the catch-all, so it goes last.
for _module in (claude_code, codex, openhands, swe_agent, adp, goose, aider, openai):
    register(_module.FORMAT)
