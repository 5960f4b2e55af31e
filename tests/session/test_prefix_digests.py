"""identity.PrefixDigests: a conversation's next history digested from its last one's hash is exactly what
digesting every message gives, whatever changed where (a byte anywhere in the history is noticed)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import microcompact.identity as identity
from microcompact.identity import Forms, PrefixDigests, digest_memo, digests
from microcompact.server.compaction import stable
from support.strategies import examples

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)  # past 64 bits too: orjson refuses those, the slow path digests them
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": json_values | st.text(max_size=20)},
    optional={"cache_control": json_values, "name": st.text(max_size=4), "_hid": json_values},
)
histories = st.lists(message, min_size=1, max_size=8)


def _expected(history: list[Any]) -> list[str]:
    return digests(stable(history))


def _fast(cache: PrefixDigests, key: str, history: list[Any]) -> list[str]:
    with digest_memo():
        return cache.digests(key, history, stable(history))


def _changed(value: Any, data: st.DataObject) -> Any:
    """``value`` with one leaf somewhere replaced by another value (maybe an equal-looking one)."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        k = data.draw(st.sampled_from(sorted(value)))
        return {**value, k: _changed(value[k], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _changed(value[i], data), *value[i + 1 :]]
    return data.draw(scalars | st.sampled_from([1, 1.0, True, 0, 0.0, -0.0, False, "", None, "1"]))


@settings(max_examples=examples(300))
@given(histories, st.data())
def test_a_continuation_with_one_change_anywhere_digests_as_the_slow_path(first: list[Any], data: Any) -> None:
    cache = PrefixDigests()
    assert _fast(cache, "k", first) == _expected(first)
    second = [dict(m) for m in first] + data.draw(st.lists(message, max_size=3))
    if data.draw(st.booleans()):  # a change in a message the last request had, or in a new one
        i = data.draw(st.integers(0, len(second) - 1))
        second[i] = _changed(second[i], data)
    assert _fast(cache, "k", second) == _expected(second)
    assert _fast(cache, "k", second) == _expected(second)  # and again, from the second's hash


@given(histories, histories)
def test_any_next_history_digests_as_the_slow_path(first: list[Any], second: list[Any]) -> None:
    cache = PrefixDigests()
    for history in (first, second, first[:1], first):
        assert _fast(cache, "k", history) == _expected(history)


def test_one_changed_byte_in_a_long_history_is_its_digest_changed() -> None:
    history = [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " * 50} for i in range(200)]
    cache = PrefixDigests()
    _fast(cache, "k", history)
    for i in (0, 57, 199):
        edited = [dict(m) for m in history] + [{"role": "user", "content": "next"}]
        text = edited[i]["content"]
        edited[i]["content"] = text[:30] + ("X" if text[30] != "X" else "Y") + text[31:]
        got = _fast(cache, "k", edited)
        assert got == _expected(edited)
        assert got[i] != _expected(history)[i]
        _fast(cache, "k", history)


def test_values_that_orjson_spells_alike_digest_as_the_slow_path() -> None:
    """NaN, Infinity and null are all null to orjson (so to :func:`identity.digest` too); 1, 1.0 and
    True are not; integers past 64 bits go the slow way."""
    cache = PrefixDigests()
    for content in (None, math.nan, math.inf, 1, 1.0, True, 2**70, -(2**70), 0, -0.0, "1"):
        history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": [{"n": content}]}]
        assert _fast(cache, "k", history) == _expected(history)
        assert _fast(cache, "k", [*history, {"role": "user", "content": "b"}]) == _expected(
            [*history, {"role": "user", "content": "b"}]
        )


def test_a_continuation_digests_only_its_new_messages(monkeypatch: Any) -> None:
    calls: list[Any] = []
    real = identity.digest
    monkeypatch.setattr(identity, "digest", lambda m: calls.append(m) or real(m))
    history = [{"role": "user", "content": f"m{i}"} for i in range(50)]
    cache = PrefixDigests()
    _fast(cache, "k", history)
    assert len(calls) == 50
    _fast(cache, "k", [*history, {"role": "assistant", "content": "new"}])
    assert len(calls) == 51
    _fast(cache, "other", history)  # another key has no last history
    assert len(calls) == 101


def test_keys_are_bounded() -> None:
    cache = PrefixDigests(max_keys=3)
    for k in range(10):
        _fast(cache, str(k), [{"role": "user", "content": json.dumps(k)}])
    assert len(cache._last) == 3


@given(histories, histories)
def test_the_size_measured_is_orjsons(first: list[Any], second: list[Any]) -> None:
    cache = PrefixDigests()
    for history in (first, first + second):
        with digest_memo():
            _, size = cache.digests_and_size("k", history, stable(history))
        try:
            assert size == len(orjson.dumps(history))
        except TypeError:
            assert size is None


@given(histories, histories, st.randoms())
def test_forms_read_as_the_list_they_stand_for(first: list[Any], more: list[Any], rnd: Any) -> None:
    history = first + more
    made: list[int] = []
    forms = Forms(history, lambda m: made.append(1) or stable([m])[0])
    assert len(forms) == len(history) and list(forms) == stable(history) == forms[:]
    assert forms[-1] == stable(history)[-1] and forms[1:3] == stable(history)[1:3]
    order = list(range(len(history)))
    rnd.shuffle(order)
    again = forms.reordered(order, _expected(history))
    assert list(again) == [stable(history)[i] for i in order]
    assert digests(again) == [_expected(history)[i] for i in order] == digests([stable(history)[i] for i in order])
    assert len(made) == len(history), "each message's form is made once"


def test_a_continuation_makes_only_its_new_messages_forms() -> None:
    history = [{"role": "user", "content": f" m{i} "} for i in range(30)]
    cache = PrefixDigests()
    cache.digests("k", history, Forms(history, lambda m: stable([m])[0]))
    made: list[Any] = []
    grown = [*history, {"role": "assistant", "content": "new"}]
    forms = Forms(grown, lambda m: made.append(m) or stable([m])[0])
    assert cache.digests("k", grown, forms) == _expected(grown)
    assert made == [grown[-1]]
