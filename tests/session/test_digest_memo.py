"""identity.digest_memo: a request digests each message object once, and the memo never answers for
another object or outlives its block."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import microcompact.identity as identity
from microcompact.identity import digest, digest_memo, digests

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
messages = st.lists(st.dictionaries(st.sampled_from(["role", "content", "name", "_hid"]), json_values), max_size=12)


@given(messages)
def test_memoized_digests_equal_plain_ones(history: list[dict[str, Any]]) -> None:
    plain = digests(history)
    with digest_memo():
        first = digests(history)
        again = digests(list(reversed(history)))
    assert first == plain == [digest(m) for m in history]
    assert again == list(reversed(plain))


def test_each_object_is_digested_once_inside_and_every_time_outside(monkeypatch: Any) -> None:
    calls: list[Any] = []
    real = identity.digest
    monkeypatch.setattr(identity, "digest", lambda m: calls.append(m) or real(m))
    history = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    with digest_memo():
        digests(history)
        digests(history)
        digests(history[2:])
    assert len(calls) == 5
    digests(history)
    assert len(calls) == 10  # the memo ended with its block


def test_an_equal_copy_or_a_changed_list_is_digested_for_itself() -> None:
    """The memo is keyed by the object it holds: another object (even at a reused id) is digested anew."""
    a = {"role": "user", "content": "a"}
    with digest_memo():
        da = digests([a])[0]
        b = {"role": "user", "content": "b"}
        assert digests([b]) == [digest(b)] != [da]
        assert digests([dict(a)]) == [da]


def test_the_memo_belongs_to_its_thread() -> None:
    """A worker thread (a background pass) digesting during a request's memo does not share it."""
    seen: list[object] = []
    with digest_memo():
        worker = threading.Thread(target=lambda: seen.append(identity._MEMO.get()))
        worker.start()
        worker.join()
    assert seen == [None]
