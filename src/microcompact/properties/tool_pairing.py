"""Rule: a tool call and its results are never split.

The results of one assistant message follow it directly, so a cut (the boundary between ``messages[i-1]``
and ``messages[i]``) may never land on a tool result: it would leave the results on one side and their
call on the other. A cut that does is repaired by moving it past the results (forward) or before the call
(backward).

The module also owns the checker (:func:`tool_pairing_errors`) and the one repair of a recording whose
pairing is broken (:func:`repair_tool_pairing`), with a policy saying what the repair does where a defect
leaves a choice (see :class:`PairingPolicy`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..keys import META_KEY
from ..messages import Message, tool_call_ids
from ..render import content_text


class ToolPairing:
    """A call and its results stay on the same side of every cut."""

    name = "tool pairing"

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool:
        """True unless ``messages[index]`` is a tool result (its call is before the cut)."""
        return not (0 < index < len(messages) and messages[index].get("role") == "tool")

    def forward(self, messages: Sequence[Message], index: int) -> int:
        """The first allowed cut at or after ``index``: past the results that follow it."""
        n = len(messages)
        while index < n and messages[index].get("role") == "tool":
            index += 1
        return index

    def backward(self, messages: Sequence[Message], index: int, floor: int = 0) -> int:
        """The last allowed cut at or before ``index`` and above ``floor``: the call comes along."""
        while floor < index < len(messages) and messages[index].get("role") == "tool":
            index -= 1
        return index

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]:
        """Pairing problems in ``after`` (``before`` is not needed: pairing is a property of one list)."""
        return tool_pairing_errors(after)


TOOL_PAIRING = ToolPairing()


def tool_pairing_errors(messages: Sequence[Message]) -> list[str]:
    """Every tool result follows the assistant message that called it; every call has its result.

    Results of one assistant message come right after it (in any order), before the next non-tool
    message.
    """
    errors: list[str] = []
    open_calls: set[str] = set()
    caller = -1
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            tcid = str(m.get("tool_call_id"))
            if tcid not in open_calls:
                errors.append(
                    f"message {i}: tool result {tcid!r} has no matching call in the assistant message before it"
                )
            else:
                open_calls.discard(tcid)
            continue
        if open_calls:
            errors.append(f"message {caller}: tool call(s) {sorted(open_calls)} have no result")
            open_calls = set()
        if role == "assistant":
            ids = tool_call_ids(m)
            if ids:
                open_calls = set(ids)
                caller = i
    if open_calls:
        errors.append(f"message {caller}: tool call(s) {sorted(open_calls)} have no result")
    return errors


# --------------------------------------------------------------------------- repair

INTERRUPTED_RESULT = "[no result recorded: the call was interrupted]"
NO_RESULT = "[no result recorded]"


def _always(message: Message) -> bool:
    return True


def is_empty_assistant(message: Message) -> bool:
    """An assistant message with neither text nor tool calls (an importer drops it; a list content counts as
    something, an image say)."""
    return (
        message.get("role") == "assistant"
        and not message.get("tool_calls")
        and not content_text(message).strip()
        and not isinstance(message.get("content"), list)
    )


def _opens_a_turn(message: Message) -> bool:
    """An assistant message an importer keeps (see :func:`is_empty_assistant`)."""
    return message.get("role") == "assistant" and not is_empty_assistant(message)


@dataclass(frozen=True)
class PairingPolicy:
    """What :func:`repair_tool_pairing` does where a defect leaves a choice.

    ``rename_duplicates``: a tool-call id used twice in one assistant message either gets a fresh id
    ``<id>~<n>`` on the later call and the result that answers it (both calls kept), or the later call is
    dropped (its result then counts as a second result for the first and is dropped too).
    ``missing_result``: the keys after ``role``/``tool_call_id`` of the tool result added for a call that has
    none. ``forgets_answers``: the non-tool messages after which a result for an already-answered call counts
    as an orphan rather than as a second result (only the defect's name differs: it is dropped either way).
    """

    name: str
    rename_duplicates: bool
    missing_result: dict[str, Any] = field(default_factory=dict)
    forgets_answers: Callable[[Message], bool] = _always


# ``replay --repair`` and ``import --from openai`` (chat-completions input, checked like replay input): a
# recording's own calls are kept, renamed apart, so no call the agent made disappears; an interrupted call
# gets a result saying so. Each defect is reported by line.
RENAME_DUPLICATES = PairingPolicy(
    "rename duplicates", rename_duplicates=True, missing_result={"content": INTERRUPTED_RESULT}
)

# The format importers (``finish``): a converted recording whose call ids repeat in one message cannot tell
# which result answers which, so the later call goes; a missing result is a placeholder flagged in ``_mc``.
# A second result is told from an orphan up to the next assistant message the importer keeps.
DROP_DUPLICATES = PairingPolicy(
    "drop duplicates",
    rename_duplicates=False,
    missing_result={"content": NO_RESULT, META_KEY: {"placeholder": True}},
    forgets_answers=_opens_a_turn,
)


class Repair(NamedTuple):
    """One defect :func:`repair_tool_pairing` repaired: where (``at``: its index in the input), a name to
    count it by, the problem and what the repair did."""

    at: int
    kind: str
    problem: str
    action: str


class _Walk:
    """The repair's state over one pass of the input: the output so far and the calls still open."""

    def __init__(self, policy: PairingPolicy) -> None:
        self.policy = policy
        self.out: list[Message] = []
        self.found: list[Repair] = []
        self.pending: list[tuple[str, str]] = []  # (id in the input, id in the output) of the open calls
        self.answered: set[str] = set()
        self.caller = -1

    def close(self) -> None:
        """Give every call still open a result (the next non-tool message ended its chance)."""
        added = self.policy.missing_result.get("content")
        for original, _new in self.pending:
            problem = f"tool call {original!r} has no result (an interrupted call?)"
            action = f"added the tool result {added!r}"
            self.found.append(Repair(self.caller, "missing_tool_result_added", problem, action))
        for _original, new in self.pending:
            self.out.append({"role": "tool", "tool_call_id": new, **self.policy.missing_result})
        self.pending.clear()

    def result(self, i: int, m: Message) -> None:
        tcid = str(m.get("tool_call_id"))
        match = next((p for p in self.pending if p[0] == tcid), None)
        if match is None:
            second = tcid in self.answered
            kind = "duplicate_tool_result_dropped" if second else "orphan_tool_result_dropped"
            what = "a second result for" if second else "a result with no open call for"
            self.found.append(Repair(i, kind, f"orphan tool result: {what} tool call {tcid!r}", "dropped it"))
            return
        self.pending.remove(match)
        self.answered.add(tcid)
        self.out.append(m if match[1] == tcid else {**m, "tool_call_id": match[1]})

    def other(self, i: int, m: Message) -> None:
        self.close()
        if self.policy.forgets_answers(m):
            self.answered = set()
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if calls:
            self.caller = i
            m = self._opened(i, m, calls)
        self.out.append(m)

    def _opened(self, i: int, m: Message, calls: list[Any]) -> Message:
        """``m`` with its calls opened, a repeated id renamed or dropped as the policy says."""
        kept: list[Any] = []
        seen: set[str] = set()
        for tc in calls:
            tcid = str(tc.get("id"))
            new = tcid
            if tcid in seen:
                problem = f"duplicate tool-call id {tcid!r}"
                if not self.policy.rename_duplicates:
                    self.found.append(Repair(i, "duplicate_tool_call_dropped", problem, "dropped this call"))
                    continue
                n = 2
                while f"{tcid}~{n}" in seen:
                    n += 1
                new = f"{tcid}~{n}"
                self.found.append(
                    Repair(i, "duplicate_tool_call_renamed", problem, f"renamed this call and its result {new!r}")
                )
            seen.add(new)
            self.pending.append((tcid, new))
            kept.append(tc if new == tcid else {**tc, "id": new})
        return m if kept == calls else {**m, "tool_calls": kept}


def repair_tool_pairing(messages: Sequence[Message], policy: PairingPolicy) -> tuple[list[Message], list[Repair]]:
    """The transcript with its tool-call defects repaired, and each defect repaired.

    Defects, and what the repaired copy does about them:

    * a tool result with no open call in the assistant message before it (an orphan, or a second result
      for one call): dropped;
    * a call with no result before the next non-tool message (an interrupted call): a tool result made of
      ``policy.missing_result`` is added after the call's other results;
    * a tool-call id used twice in one assistant message (its results cannot be told apart): renamed or
      dropped, as ``policy`` says.

    An id reused by a later assistant message is not a defect: results pair with the calls of the
    assistant message right before them (as the chat-completions API does), and real recordings (SWE-agent
    demonstrations) reuse ids that way.

    An empty defect list means the transcript is valid and the copy equals the input.
    """
    walk = _Walk(policy)
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            walk.result(i, m)
        else:
            walk.other(i, m)
    walk.close()
    return walk.out, walk.found


def check_tool_pairing(messages: Sequence[Message]) -> tuple[list[Message], list[tuple[int, str, str]]]:
    """:func:`repair_tool_pairing` as ``replay --repair`` uses it (:data:`RENAME_DUPLICATES`): the repaired
    copy, and each defect as (message index, the problem, what the repair did)."""
    out, found = repair_tool_pairing(messages, RENAME_DUPLICATES)
    return out, [(r.at, r.problem, r.action) for r in found]
