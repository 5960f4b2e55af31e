"""A ``system``-role entry in the middle of a conversation is an instruction, not work to summarize: Claude
Code sends its background-task notifications that way (``test_proxy_claude_code_fork``), and the issue
asks for such entries to be forwarded as sent. Micro passes keep them (``ROLE_SEQUENCE``); a batch
compaction must too."""

from __future__ import annotations

from test_sync_history import small_config

from microcompact.messages import is_marker
from microcompact.session import Session

NOTIFICATION = {"role": "system", "content": "[SYSTEM NOTIFICATION] The background agent finished."}


def step(n: int) -> list[dict[str, object]]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "bash", "arguments": f'{{"n": {n}}}'}}
    output = "\n".join(f"step {n} line {i}: " + "output " * 10 for i in range(60))
    return [
        {"role": "assistant", "content": f"Step {n}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": output},
    ]


def test_a_batch_compaction_keeps_a_system_entry_in_the_middle() -> None:
    history: list[dict[str, object]] = [{"role": "user", "content": "Run the steps."}]
    for n in range(12):
        history += step(n)
        if n == 5:
            history.append(NOTIFICATION)
    session = Session(small_config())
    session.sync_history(history)
    result = session.compact()
    assert any(is_marker(m) for m in session.transcript), result
    assert NOTIFICATION in [{"role": m["role"], "content": m["content"]} for m in session.messages]
