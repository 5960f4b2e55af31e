"""The NaN/Infinity check of ``validate_message`` (``messages._non_finite_number``): its fast scan (values
only, no paths built) never misses one, and the path it reports leads to it, at any place in any nesting."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from microcompact.messages import TranscriptError, _non_finite_number, validate_message

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.floats(allow_nan=True, allow_infinity=True)
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=30,
)


def non_finite_anywhere(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(non_finite_anywhere(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(non_finite_anywhere(v) for v in value)
    return False


def at_path(value: Any, path: str, top: bool = True) -> Iterator[Any]:
    """Every value ``path`` (as ``_non_finite_number`` spells it: ``a.b[2]``, a key joined by a dot unless
    it comes first) can lead to in ``value``: keys may hold "." or "[" or be empty, so a path can have
    several readings. ``top``: nothing of the path was read yet."""
    if not path:
        yield value
    if isinstance(value, dict):
        for k, v in value.items():
            key = str(k) if top else f".{k}"
            rest = path[len(key) :]
            if path.startswith(key) and (not rest or rest[0] in ".[" or key == ""):
                yield from at_path(v, rest, top=top and key == "")
    elif isinstance(value, (list, tuple)) and path.startswith("["):
        index, _, rest = path[1:].partition("]")
        if index.isdigit() and int(index) < len(value):
            yield from at_path(value[int(index)], rest, top=False)


@given(values)
def test_the_scan_finds_every_non_finite_number_and_names_where(value: Any) -> None:
    found = _non_finite_number(value)
    assert (found is not None) == non_finite_anywhere(value)
    if found is not None:
        assert any(isinstance(v, float) and not math.isfinite(v) for v in at_path(value, found[0]))


@given(values)
def test_a_message_holding_one_is_refused_with_its_place(value: Any) -> None:
    message = {"role": "user", "content": "hi", "extra": value}
    if non_finite_anywhere(value):
        try:
            validate_message(message, "message 3")
        except TranscriptError as exc:
            assert str(exc).startswith("message 3: extra") and "JSON cannot hold" in str(exc)
        else:
            raise AssertionError("a NaN or Infinity was accepted")
    else:
        validate_message(message, "message 3")
