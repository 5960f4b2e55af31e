"""The long-text memo: the function's own answer, computed once per text while it is recent, within its bound,
and the same answer from every thread."""

from __future__ import annotations

import re
import threading

from hypothesis import given
from hypothesis import strategies as st

from microcompact import redact
from microcompact.identifiers import identifiers
from microcompact.textmemo import SHORT_TEXT_CHARS, TextMemo
from microcompact.tokens import EstimateCounter, TiktokenCounter


def _counting(calls: list[str]) -> TextMemo[int]:
    def fn(text: str) -> int:
        calls.append(text)
        return len(text.split())

    return TextMemo(fn, max_chars=30)


def test_an_equal_text_is_read_once_and_gets_the_same_answer() -> None:
    calls: list[str] = []
    memo = _counting(calls)
    text = "one two three"
    assert memo(text) == 3
    assert memo("".join(["one two", " three"])) == 3  # an equal text, another object
    assert calls == [text]


def test_the_least_recently_used_text_goes_first_and_the_bound_holds() -> None:
    calls: list[str] = []
    memo = _counting(calls)
    a, b, c = "a " * 5, "b " * 5, "c " * 5  # 10 characters each: three fill the 30
    memo(a), memo(b), memo(c), memo(a)  # a is the most recent now
    assert memo.chars == 30 and calls == [a, b, c]
    memo("d " * 5)  # b, the least recently used, goes
    assert memo.chars == 30 and len(memo) == 3
    memo(a), memo(c)
    assert calls == [a, b, c, "d " * 5]
    memo(b)
    assert calls[-1] == b


def test_a_text_over_the_bound_is_answered_and_not_kept() -> None:
    calls: list[str] = []
    memo = _counting(calls)
    big = "word " * 10
    assert memo(big) == memo(big) == 10
    assert calls == [big, big] and len(memo) == 0 and memo.chars == 0


def test_threads_reading_the_same_texts_get_the_same_answers() -> None:
    memo = TextMemo(lambda text: sum(map(ord, text)), max_chars=2_000)
    texts = [f"text {i} " * 20 for i in range(40)]  # more than the memo holds: evictions under contention
    want = [sum(map(ord, t)) for t in texts]
    wrong: list[str] = []

    def read() -> None:
        for _ in range(5):
            for text, expected in zip(texts, want, strict=True):
                if memo(text) != expected:
                    wrong.append(text)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and memo.chars <= 2_000


def test_remembered_long_counts_and_identifiers_are_the_fresh_ones() -> None:
    line = "calls end_session in src/app/session.py at 6e3cdee1 \n\n   "
    text = line * (SHORT_TEXT_CHARS // len(line) + 3)
    counter = TiktokenCounter()
    fresh = len(counter._enc.encode(text, disallowed_special=()))
    assert counter.count(text) == fresh == TiktokenCounter().count("".join(list(text)))
    estimate = EstimateCounter()
    assert estimate.count(text) == estimate.count("".join(list(text))) == (len(" ".join(text.split()) + " ") + 3) // 4
    first = identifiers(text)
    first.add("added_by_a_caller")  # a caller's set is its own
    assert identifiers(text) == {"end_session", "src/app/session.py", "session.py", "6e3cdee1"}


def test_a_remembered_redaction_is_the_rules_own_and_a_fresh_list() -> None:
    text = "connect postgres://admin:Hunter2Pass9@db.internal:5432/app then " + "ordinary build log line\n" * 12
    text += 'password = "s3cretValue77" and {"u": "https:\\/\\/bob:Other9Pass@h"}'  # escaped slashes too
    assert len(text) > SHORT_TEXT_CHARS
    fresh = redact._read_all(text)
    assert sorted(fresh[1]) == ["Hunter2Pass9", "Other9Pass", "s3cretValue77"]
    first = redact._redact_all(text)
    first[1].append("added_by_a_caller")  # a caller's list is its own
    again = redact._redact_all("".join(list(text)))
    assert first[0] == again[0] == fresh[0] and "Hunter2Pass9" not in again[0] and "Other9Pass" not in again[0]
    assert again[1] == fresh[1]


_WHITESPACE = re.compile(r"\s+")


@given(st.text() | st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u3000ab\u00e9\ud800", max_size=30))
def test_the_estimate_is_the_folded_texts_bytes_over_four(text: str) -> None:
    # What the estimator documents, written the plain way: whitespace runs folded, UTF-8 bytes, rounded up.
    want = (len(_WHITESPACE.sub(" ", text).encode("utf-8", "replace")) + 3) // 4
    assert EstimateCounter().count(text) == want
