"""The compaction contract, checked: what tests and callers use to tell whether a transcript or a pass's
output is what every API accepts and what the library promises.

Each checker returns a list of problems (empty = holds), one line each naming the message. They live with
their rules in :mod:`microcompact.properties`; this is their public home, so the top-level package exports
what a user builds with and a test suite imports the checks from here.

- :func:`contract_errors`: everything a pass broke going from ``before`` to ``after`` (every rule in
  :data:`~microcompact.properties.RULES`, plus the protected head and tail when named);
- :func:`tool_pairing_errors`, :func:`role_sequence_errors` (pairing included; ``strict_alternation`` for
  what ``to_api(strict_alternation=True)`` makes), :func:`user_message_errors`: one rule each;
- :func:`check_tool_pairing`: a recording's pairing defects and the repaired copy, as ``replay --repair``
  makes it (:func:`repair_tool_pairing` with the other policy is what the importers use).
"""

from __future__ import annotations

from .properties import (
    DROP_DUPLICATES,
    INTERRUPTED_RESULT,
    NO_RESULT,
    RENAME_DUPLICATES,
    RULES,
    PairingPolicy,
    Repair,
    Rule,
    check_tool_pairing,
    contract_errors,
    repair_tool_pairing,
    role_sequence_errors,
    tool_pairing_errors,
    user_message_errors,
)

__all__ = [
    "DROP_DUPLICATES",
    "INTERRUPTED_RESULT",
    "NO_RESULT",
    "RENAME_DUPLICATES",
    "RULES",
    "PairingPolicy",
    "Repair",
    "Rule",
    "check_tool_pairing",
    "contract_errors",
    "repair_tool_pairing",
    "role_sequence_errors",
    "tool_pairing_errors",
    "user_message_errors",
]
