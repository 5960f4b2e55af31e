"""The identifier rule: what counts as a distinctive identifier, one rule per case, and where it is read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.identifiers import (
    _TRIM,
    _candidates,
    _token_identifiers,
    argument_values,
    identifiers,
    is_identifier,
    message_identifiers,
)
from microcompact.textmemo import SHORT_TEXT_CHARS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see src/app/session.py for it", {"src/app/session.py", "session.py"}),
        ("cat /etc/hosts", {"etc/hosts"}),
        ("the function end_session/2 returns", {"end_session/2", "end_session"}),
        ("call os.path.join here", {"os.path.join"}),
        ("ActiveSessionRegistry and commitEvent", {"ActiveSessionRegistry", "commitEvent"}),
        ("MAX_TOKENS = 3", {"MAX_TOKENS"}),
        ("commit 6e3cdee landed", {"6e3cdee"}),
        ("listening on port 40213.", {"40213"}),
        ("error at session.py:42:7,", {"session.py:42:7", "session.py"}),
        ("version v1.2.3-rc shipped", {"v1.2.3-rc"}),
    ],
)
def test_each_kind_of_identifier_is_found(text: str, expected: set[str]) -> None:
    assert identifiers(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Session request the And Then",  # plain words, capitalised or not
        "--verbose --context-limit",  # flags
        "a_b x.y 123 abc",  # too short
        "deadbeef cafebabe",  # hex with no digit
    ],
)
def test_plain_words_flags_and_short_tokens_are_not(text: str) -> None:
    assert identifiers(text) == set()


def test_a_long_number_counts_and_a_short_one_does_not() -> None:
    assert identifiers("took 123 ms, pid 40213") == {"40213"}


def test_trailing_punctuation_is_trimmed() -> None:
    assert identifiers("(read src/x/yy.py), then foo_bar.") == {"src/x/yy.py", "yy.py", "foo_bar"}


def test_tool_call_argument_values_count_not_their_keys() -> None:
    message = {
        "role": "assistant",
        "content": "Reading it.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"file_path": "lib/registry.ex"})},
            }
        ],
    }
    assert message_identifiers(message) == {"lib/registry.ex", "registry.ex"}


def test_argument_values_walk_nested_json_and_keep_non_json_text() -> None:
    assert sorted(argument_values('{"a": ["x_y_z", {"b": 12345}], "c": true}')) == ["12345", "x_y_z"]
    assert list(argument_values("not json at all")) == ["not json at all"]


@given(st.text(max_size=200))
def test_every_identifier_found_is_an_identifier_and_in_the_text(text: str) -> None:
    for found in identifiers(text):
        assert is_identifier(found)
        assert found in text


@given(st.text(max_size=100), st.text(max_size=100))
def test_text_joined_by_a_newline_keeps_what_each_half_had(a: str, b: str) -> None:
    assert identifiers(a) | identifiers(b) <= identifiers(a + "\n" + b)


def test_a_remembered_reading_is_the_same_and_a_fresh_set() -> None:
    for text in ("see end_session/2 in src/app/session.py", "x" * (SHORT_TEXT_CHARS - 8) + " a_b_c_d"):
        first = identifiers(text)
        first.add("added_by_a_caller")
        assert identifiers(text) == first - {"added_by_a_caller"}
    line = "calls end_session in src/app/session.py at 6e3cdee1 "
    long_text = line * (SHORT_TEXT_CHARS // len(line) + 1)
    assert len(long_text) > SHORT_TEXT_CHARS >= len(line)
    assert (
        identifiers(long_text) == identifiers(line) == {"end_session", "src/app/session.py", "session.py", "6e3cdee1"}
    )


_TOKEN_ALPHABET = "abcdefXYZ0123456789_./-:@#$~"


@given(
    st.text(alphabet=_TOKEN_ALPHABET, min_size=1, max_size=14)
    | st.text(alphabet="abcxyzABCXYZ", min_size=1, max_size=9)
    | st.text(alphabet="0123456789", min_size=1, max_size=9)
    | st.from_regex(r"[A-Za-z]{1,8}[0-9.:,;/-]{0,3}", fullmatch=True)
)
def test_the_plain_word_and_number_shortcut_gives_the_rules_answer(token: str) -> None:
    # Plain words and plain numbers skip the rule's searches: for every token, the answer is the rule's own.
    rule = tuple(c for c in _candidates(token.rstrip(_TRIM)) if is_identifier(c))
    _token_identifiers.cache_clear()
    assert _token_identifiers(token) == rule
