"""Short texts are counted once per process: the remembered count is the encoder's, on both sides of the
length that is remembered, for every counter of an encoding."""

from __future__ import annotations

from microcompact.textmemo import SHORT_TEXT_CHARS
from microcompact.tokens import TiktokenCounter


def test_remembered_counts_are_the_encoders() -> None:
    first, second = TiktokenCounter(), TiktokenCounter()
    encoder = first._enc
    texts = ["", "x", "end_session pane_id", "é" * SHORT_TEXT_CHARS, "ab " * (SHORT_TEXT_CHARS // 3 + 1)]
    texts += ["- read `/w/lib/registry.ex`" + "y" * n for n in (SHORT_TEXT_CHARS - 27, SHORT_TEXT_CHARS - 26)]
    for text in texts:
        want = len(encoder.encode(text, disallowed_special=())) if text else 0
        assert first.count(text) == want == second.count(text) == first.count(text)
