"""recall and expand against a real store (SQLite and PostgreSQL: the ``store_factory`` fixture), over two
conversations of two credentials folded by the proxy's own engine: each capability reads its own
conversation's originals and nothing of the other's, every refusal is one line that tells nothing about
other conversations, and what comes back is redacted and bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from microcompact.keys import RECALL_META
from microcompact.recall_tools import MAX_EXPAND_CHARS, MAX_QUERY_CHARS, Originals, RecallRefused
from microcompact.recall_tools.reader import MAX_HITS
from support.recall_folds import AWS_SECRET, Folded, fold_two_conversations


@pytest.fixture
def folded(store_factory, tmp_path: Path):
    store = store_factory.open()
    a, b = fold_two_conversations(store, tmp_path)
    return Originals(store), store, a, b


def handles_in(text: str) -> set[str]:
    return {word for word in text.replace(":", " ").split() if word[:1] == "m" and word[1:].isdigit()}


def stored_rows(store, conv: Folded) -> set[str]:
    return {f"m{m['_row']}" for m in store.export(conv.session_id, include_absorbed=True)}


def test_each_capability_finds_its_own_conversations_originals(folded) -> None:
    tools, store, a, b = folded
    assert a.session_id != b.session_id and a.conversation != b.conversation
    for conv, tag, other in ((a, "alpha", "bravo"), (b, "bravo", "alpha")):
        found = tools.recall(conv.conversation, f"{tag}_unique_1 shared_marker_word")
        lines = found.splitlines()
        assert f"{tag}_unique_1 " in lines[1], "the exact identifier ranks first"
        assert other not in found, "nothing of the other credential's conversation"
        assert handles_in(found) <= stored_rows(store, conv)


def test_identifiers_rank_before_words_and_whole_names_before_parts(folded) -> None:
    tools, _, a, _ = folded
    lines = tools.recall(a.conversation, "alpha_unique_1 module").splitlines()
    assert "alpha_unique_1 " in lines[1]
    assert all("alpha_unique_1 " not in line for line in lines[2:]), "alpha_unique_10 is not alpha_unique_1"


def test_expand_gives_the_original_with_its_tool_call(folded) -> None:
    tools, _, a, _ = folded
    hit = tools.recall(a.conversation, "alpha_unique_4").splitlines()[1]
    handle = hit.split()[0]
    whole = tools.expand(a.conversation, handle)
    assert 'TOOL CALL [alpha4] read({"path": "src/alpha/module_4.py"})' in whole, "the call that made it"
    assert "TOOL RESULT [alpha4]: src/alpha/module_4.py" in whole
    assert "alpha_function_4_59(): return 59" in whole, "the result whole"
    assert whole.index("TOOL CALL") < whole.index("TOOL RESULT")


def test_the_summary_handle_lists_what_it_folded(folded) -> None:
    tools, _, a, _ = folded
    index = tools.expand(a.conversation, a.marker_handle)
    assert index.startswith(f"{a.marker_handle} is a summary of ")
    assert "src/alpha/module_0.py" in index and "bravo" not in index


def test_another_conversations_handle_is_refused_like_a_missing_one(folded) -> None:
    tools, store, a, b = folded
    theirs = sorted(stored_rows(store, b), key=lambda h: int(h[1:]))
    for handle in [*theirs[:3], b.marker_handle, "m999999"]:
        with pytest.raises(RecallRefused) as refused:
            tools.expand(a.conversation, handle)
        assert str(refused.value) == f"handle {handle} is not in this conversation"


def test_forged_and_malformed_capabilities_are_refused(folded) -> None:
    tools, store, a, _ = folded
    forged = "0" * 24 if a.conversation != "0" * 24 else "1" * 24
    for bad in (forged, a.session_id, a.conversation[:-1], "", "x" * 5000):
        with pytest.raises(RecallRefused) as refused:
            tools.recall(bad, "alpha_unique_1")
        message = str(refused.value)
        assert "\n" not in message and len(message) < 200, "one short line"
        assert "copy it from the summary's note" in message
    assert store.sessions_with_meta(RECALL_META, forged) == []


def test_a_huge_or_empty_query_is_refused_in_one_line(folded) -> None:
    tools, _, a, _ = folded
    for bad, says in (("a" * (MAX_QUERY_CHARS + 1), "recall takes at most"), ("   ", "empty"), ("a b", "no word")):
        with pytest.raises(RecallRefused, match=says):
            tools.recall(a.conversation, bad)


def test_hits_are_bounded(folded) -> None:
    tools, _, a, _ = folded
    lines = tools.recall(a.conversation, "shared_marker_word", limit=10_000).splitlines()
    assert 1 < len(lines) <= MAX_HITS + 1


def test_what_comes_back_is_redacted_bare_mentions_too(folded) -> None:
    tools, _, a, _ = folded
    found = tools.recall(a.conversation, "AWS_SECRET_ACCESS_KEY deploy")
    assert "AWS_SECRET_ACCESS_KEY=[REDACTED]" in found or "AWS_SECRET_ACCESS_KEY" in found
    for handle in handles_in(found):
        whole = tools.expand(a.conversation, handle)
        assert AWS_SECRET not in whole
    assert AWS_SECRET not in found
    bare = tools.expand(a.conversation, next(h for h in handles_in(tools.recall(a.conversation, "deploy"))))
    assert "the deploy used [REDACTED] again" in bare, "the bare mention is hidden by the conversation's memory"


def test_a_query_for_a_secret_finds_nothing(folded) -> None:
    tools, _, a, _ = folded
    assert tools.recall(a.conversation, f'"{AWS_SECRET}"').startswith("Nothing folded"), "no oracle for secrets"


def test_an_active_message_is_not_expanded(folded) -> None:
    tools, store, a, _ = folded
    active = next(m for m in store.load_active(a.session_id) if m.get("role") == "tool")
    with pytest.raises(RecallRefused, match="never folded"):
        tools.expand(a.conversation, f"m{active['_row']}")


def test_a_long_original_is_cut_and_says_so(store_factory, tmp_path: Path) -> None:
    store = store_factory.open()
    a, _ = fold_two_conversations(store, tmp_path, long_output=3 * MAX_EXPAND_CHARS)
    tools = Originals(store)
    handle = tools.recall(a.conversation, "alpha_unique_0").splitlines()[1].split()[0]
    whole = tools.expand(a.conversation, handle)
    assert "[cut: " in whole and "characters shown" in whole
    assert len(whole) < MAX_EXPAND_CHARS + 1000
