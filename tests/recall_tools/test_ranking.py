"""How recall reads a query: identifiers (with their case) before words, bounded; an excerpt shows the match."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from microcompact.recall_tools.ranking import MAX_TERMS, excerpt, parse_query, score


def test_identifiers_and_words_are_told_apart() -> None:
    q = parse_query('where is pane_exists in src/app.py, ActiveSessionRegistry and 40213 "end_session/2" failing')
    assert q.identifiers == ("end_session/2", "pane_exists", "src/app.py", "ActiveSessionRegistry", "40213")
    assert q.words == ("failing",), "filler words and short ones are dropped"


def test_an_identifier_counts_more_than_any_few_words() -> None:
    q = parse_query("commit_event failing tests")
    only_words = "the failing tests failing tests failing tests"
    assert score("commit_event", q)[0] > score(only_words, q)[0] > 0
    assert score("commit_event_log", q)[0] < score("commit_event", q)[0], "a part of a longer name is weaker"
    assert score("Commit_Event", parse_query("commit_event"))[0] == 0, "identifiers keep their case"


@given(st.text(max_size=3000))
def test_a_query_never_has_more_than_the_bound(query: str) -> None:
    q = parse_query(query)
    assert len(q.terms) <= MAX_TERMS and all(len(t) >= 3 for t in q.terms)


@given(st.text(min_size=1, max_size=2000), st.integers(min_value=0, max_value=1999))
def test_an_excerpt_is_one_short_line_around_the_match(text: str, at: int) -> None:
    at = min(at, len(text) - 1)
    shown = excerpt(text, at)
    assert "\n" not in shown and len(shown) <= 262
