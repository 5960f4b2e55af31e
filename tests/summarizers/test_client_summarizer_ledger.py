"""A caller's own model (``summarizer_from``) writes the notes; the file ledger and failing commands are kept by
code beside them, pass after pass, whatever the model writes (issue 12's "a model can rewrite or drop the
prose but not lose the facts", for the framework path too)."""

from __future__ import annotations

import json

from microcompact import summarizer_from
from microcompact.messages import marker_body, marker_kind


def edit(cid: str, path: str) -> list[dict]:
    call = {"id": cid, "type": "function", "function": {"name": "Edit", "arguments": json.dumps({"file_path": path})}}
    return [
        {"role": "assistant", "content": "Editing.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": cid, "content": f"The file {path} has been updated."},
    ]


def test_the_ledger_survives_a_model_that_forgets_it() -> None:
    prompts: list[str] = []

    def forgetful(prompt: str) -> str:
        prompts.append(prompt)
        return "### Goal\nFix things.\n### Work done\nSome edits.\n### Findings\nnone\n### Next\nnone"

    summarizer = summarizer_from(forgetful, model="forgetful")
    summary = summarizer.merge("", edit("a", "src/first_file.py"))
    assert "src/first_file.py" in summary and "### Files" in summary
    for n in range(5):
        summary = summarizer.merge(summary, edit(f"b{n}", f"src/later_{n}.py"))
    assert "src/first_file.py" in summary, "a file edited in the first pass is still named"
    assert summary.startswith("### Goal\nFix things.")
    assert "### Files" not in prompts[-1], "the model sees its notes, not the ledger kept beside them"


def test_notes_without_any_file_work_are_left_as_the_model_wrote_them() -> None:
    notes = "### Goal\nChat.\n### Files\n- a model's own list stays"
    summarizer = summarizer_from(lambda prompt: notes, model="m")
    assert summarizer.merge("", [{"role": "assistant", "content": "Hello."}]) == notes


def test_a_session_with_a_client_summarizer_keeps_the_ledger_in_its_marker() -> None:
    from microcompact.config import parse_config
    from microcompact.session import Session

    config = parse_config(
        {
            "compression": {"micro_compact": True, "protect_first_n": 1, "tokenizer": "estimate"},
            "model": {"context_length": 20_000},
        }
    )
    session = Session(config, summarizer_from(lambda p: "### Goal\nx\n### Work done\ny", model="m"))
    for n in range(8):
        session.extend([{"role": "user", "content": f"task {n}"}, *edit(f"c{n}", f"src/mod_{n}.py")])
        session.extend([{"role": "assistant", "content": "x " * 2000}])
        session.finalize_turn()
    body = next(marker_body(m) for m in session.transcript if marker_kind(m) == "micro")
    assert "src/mod_0.py" in body
