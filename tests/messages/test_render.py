"""One rendering of a message's text, with what each reader needs as parameters.

Search must find a message by the tool it called, the arguments it passed and its author's name; a
summarizer must see who said what; everything else sees the content alone.
"""

from __future__ import annotations

import json
from typing import Any

from microcompact import messages
from microcompact.render import content_text, exchange_text, message_text
from microcompact.store import search_text
from microcompact.summarizers import render_exchange

CALL = {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "pytest -x"}'}}
ASSISTANT = {"role": "assistant", "content": "Running the tests.", "tool_calls": [CALL], "name": "builder"}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "  2 failed\n"}


def test_content_text_is_the_content_alone_with_placeholders_for_media() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {}},
            {"type": "input_audio"},
            "raw",
        ],
    }
    assert content_text(message) == "look\n[image]\n[audio]\nraw"
    assert message_text(ASSISTANT) == "Running the tests."
    assert messages.content_text is content_text  # still importable where callers always found it


def test_search_text_holds_content_call_names_arguments_and_author() -> None:
    assert message_text(ASSISTANT, tool_calls=True, name=True) == (
        'Running the tests.\nBash\n{"command": "pytest -x"}\nbuilder'
    )
    assert search_text(ASSISTANT) == message_text(ASSISTANT, tool_calls=True, name=True)


def test_prompt_text_labels_roles_calls_and_results() -> None:
    system = {"role": "developer", "content": "be brief"}
    assert exchange_text([system, ASSISTANT, RESULT]) == (
        "SYSTEM: be brief\n\n"
        "ASSISTANT: Running the tests.\n\n"
        'TOOL CALL [c1] Bash({"command": "pytest -x"})\n\n'
        "TOOL RESULT [c1]: 2 failed"
    )
    assert render_exchange is exchange_text  # the summarizers' name for it


def test_a_message_with_nothing_to_say_adds_no_empty_block() -> None:
    silent = {"role": "assistant", "content": "   "}
    assert exchange_text([RESULT, silent, RESULT]) == "TOOL RESULT [c1]: 2 failed\n\nTOOL RESULT [c1]: 2 failed"
    assert message_text(silent, tool_calls=True, labels=True) == ""


def test_object_arguments_search_as_ascii_json_and_reach_a_model_as_written() -> None:
    arguments: dict[str, Any] = {"path": "café.txt"}
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c2", "function": {"name": "Read", "arguments": arguments}}],
    }
    assert message_text(message, tool_calls=True) == f"Read\n{json.dumps(arguments)}"
    assert "caf\\u00e9" in message_text(message, tool_calls=True)
    assert exchange_text([message]) == 'TOOL CALL [c2] Read({"path": "café.txt"})'


def test_empty_or_missing_arguments_add_nothing_to_search() -> None:
    for function in ({"name": "Ls", "arguments": {}}, {"name": "Ls", "arguments": None}, {"name": "Ls"}):
        message = {"role": "assistant", "tool_calls": [{"id": "c3", "function": function}]}
        assert message_text(message, tool_calls=True) == "Ls"


def test_calls_that_are_not_objects_are_skipped_by_every_reader() -> None:
    message = {"role": "assistant", "content": "ok", "tool_calls": ["junk", {"id": "c4", "function": "junk"}, CALL]}
    assert message_text(message, tool_calls=True) == 'ok\nBash\n{"command": "pytest -x"}'
    assert exchange_text([message]) == 'ASSISTANT: ok\n\nTOOL CALL [c1] Bash({"command": "pytest -x"})'
