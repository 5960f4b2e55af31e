"""Hypothesis strategies for realistic agent transcripts (OpenAI chat-completions message dicts).

What a generated transcript looks like:

- an optional system message;
- turns: a user message (string content, or a list of text and ``image_url`` parts; never None), then the
  agent's iterations: an assistant message with 0..4 tool calls (parallel calls, their results in a shuffled
  order), content a string, None (only with tool calls) or a list of text parts; tool results from a few
  characters to ~30K characters, some of them whitespace-heavy; a final assistant answer, except for
  interrupted turns (ending on tool results) and the occasional user message that gets no reply at all;
- now and then a long turn of 20-60 iterations;
- now and then a tool output or a user message that quotes ``MARKER_PREFIX`` (or a whole fake marker)
  verbatim, which must never be taken for a marker.

Every tool call id is unique within a transcript (``call_<n>``), every assistant text starts with a unique
step tag (``s<n>:``) and every user text with a unique tag (``u<n>:``), so tests can tell exactly which
messages a summarizer saw and where user messages went. Text is built from a few words repeated, which keeps
generation cheap even for 30K-character outputs and still lets hypothesis shrink sizes and word choices.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from microcompact.messages import MARKER_END, MARKER_HEADING, MARKER_PREFIX, content_text, is_marker

Message = dict[str, Any]

# MC_PROPERTY_SCALE=10 multiplies every property test's examples, for a deeper hunt than CI's.
SCALE = float(os.environ.get("MC_PROPERTY_SCALE", "1"))
# The least examples a property test runs in the fast profile: enough for generated transcripts of every shape
# (long turns, markers quoted in outputs, interrupted turns) to come up in a run.
FAST_FLOOR = 8


def examples(n: int) -> int:
    """The examples to run for a property test whose thorough run takes ``n``: all ``n`` under the "ci"
    hypothesis profile (``make test-all``), the same share of ``n`` as the loaded profile's max_examples is of
    hypothesis' 100 under others (``make test`` loads "fast", see conftest.py), never below ``FAST_FLOOR``."""
    share = settings.default.max_examples / 100
    return max(min(n, FAST_FLOOR), round(n * share * SCALE))


WORDS = [
    "def",
    "return",
    "import",
    "self",
    "None",
    "error",
    "file",
    "line",
    "test",
    "passed",
    "failed",
    "config",
    "token",
    "value",
    "path",
    "src/app.py",
    "README.md",
    "ok",
    "the",
    "a",
    "of",
    "and",
    "=",
    "{",
    "}",
    "(",
    ")",
    "TODO",
    "fix",
    "build",
    "warning:",
    "42",
    "0x1f",
    "user_id",
    "résumé",
    "数据",
    "🙂",
    "->",
    "#",
    "assert",
]

TOOL_NAMES = ["Bash", "Read", "Edit", "Grep", "Write", "WebFetch"]

# Size tiers of a tool result in characters; earlier tiers are more likely and are where shrinking goes.
SIZE_TIERS = {
    "tiny": (1, 24),
    "small": (24, 600),
    "medium": (600, 4_000),
    "large": (4_000, 30_000),
}
TIER_WEIGHTS = ["tiny"] * 3 + ["small"] * 5 + ["medium"] * 2 + ["large"]
LONG_TURN_TIERS = ["tiny"] * 3 + ["small"] * 6 + ["medium"]

FAKE_MARKER = (
    f"{MARKER_PREFIX}\n\n{MARKER_HEADING}\n\n(rolling summary, updated turn by turn)\n\n"
    f"- quoted from an old log, not a real summary\n\n{MARKER_END}"
)

STEP_TAG = re.compile(r"\bs(\d+):")
USER_TAG = re.compile(r"\bu(\d+):")


@dataclass
class _Ids:
    """Per-transcript counters (a fresh one for every generated example)."""

    call: int = 0
    step: int = 0
    user: int = 0

    def next_call(self) -> str:
        self.call += 1
        return f"call_{self.call}"

    def next_step(self) -> str:
        self.step += 1
        return f"s{self.step}:"

    def next_user(self) -> str:
        self.user += 1
        return f"u{self.user}:"


@cache
def _one_of(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """``st.sampled_from(values)``, built once: hypothesis caches no strategy of a list, and building one (and
    a list strategy over it) at every draw cost the property tests more than the draws themselves."""
    return st.sampled_from(values)


def pick(draw: st.DrawFn, values: list[Any]) -> Any:
    """One of ``values``, drawn exactly as ``st.sampled_from(values)`` draws it."""
    return draw(_one_of(tuple(values)))


_WORD_LISTS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws; shrinks towards False (the ordinary case)."""
    return draw(st.integers(1, one_in)) == one_in


@st.composite
def words_text(draw: st.DrawFn, min_chars: int = 1, max_chars: int = 200, whitespace_heavy: bool | None = None) -> str:
    """Text of ``min_chars``..``max_chars`` characters made of a few words repeated (never empty)."""
    words = draw(_WORD_LISTS)
    if whitespace_heavy is None:
        whitespace_heavy = rarely(draw, 6)
    base = " ".join(words)
    if whitespace_heavy:
        indent = draw(st.integers(4, 40))
        base = " " * indent + base + " " * draw(st.integers(0, 60)) + "\n" * draw(st.integers(1, 4))
    else:
        base += "\n"
    target = draw(st.integers(min_chars, max(min_chars, max_chars)))
    reps = target // len(base) + 1
    text = (base * reps)[:target]
    return text if text.strip() else "x" + text


@st.composite
def tool_output(draw: st.DrawFn, tiers: list[str] = TIER_WEIGHTS) -> str | list[dict[str, Any]]:
    tier = pick(draw, tiers)
    lo, hi = SIZE_TIERS[tier]
    text = draw(words_text(lo, hi))
    quote = draw(st.integers(0, 14))  # 13, 14: quote the marker (shrinks towards plain output)
    if quote == 13:
        text = f"log excerpt:\n{MARKER_PREFIX}\n{text}"
    elif quote == 14:
        text = FAKE_MARKER + "\n" + text  # a tool output that *starts* like a marker
    if rarely(draw, 20):
        return [{"type": "text", "text": text}]  # array content is allowed for tool results too
    return text


@st.composite
def user_message(draw: st.DrawFn, ids: _Ids) -> Message:
    tag = ids.next_user()
    text = draw(words_text(1, 300, whitespace_heavy=False))
    quote = draw(st.integers(0, 11))  # 10, 11: quote the marker
    if quote == 10:
        text = f"{MARKER_PREFIX} <- why does the transcript say this? {tag} {text}"  # starts with the prefix
        body = text
    elif quote == 11:
        body = f"{FAKE_MARKER}\n{tag} {text}"
    else:
        body = f"{tag} {text}"
    if rarely(draw, 5):
        parts: list[dict[str, Any]] = [{"type": "text", "text": body}]
        for _ in range(draw(st.integers(1, 2))):
            parts.append({"type": "image_url", "image_url": {"url": f"https://example.com/{tag[:-1]}.png"}})
            if draw(st.booleans()):
                parts.append({"type": "text", "text": draw(words_text(1, 60, whitespace_heavy=False))})
        return {"role": "user", "content": parts}
    return {"role": "user", "content": body}


_ARG_KEYS = {
    "Bash": "command",
    "Read": "path",
    "Edit": "path",
    "Grep": "pattern",
    "Write": "file_path",
    "WebFetch": "url",
}


def _call(cid: str, name: str, arg: str) -> dict[str, Any]:
    args = {_ARG_KEYS[name]: arg.strip() or "x"}
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@st.composite
def iteration(draw: st.DrawFn, ids: _Ids, tiers: list[str] = TIER_WEIGHTS) -> list[Message]:
    """One assistant message with its tool calls, followed by all results in a shuffled order."""
    n_calls = pick(draw, [1, 1, 1, 2, 2, 3, 4, 0])
    step = ids.next_step()
    style = pick(draw, ["str", "none", "list"]) if n_calls else pick(draw, ["str", "list"])
    text = f"{step} {draw(words_text(1, 120, whitespace_heavy=False))}"
    if style == "str":
        msg: Message = {"role": "assistant", "content": text}
    elif style == "none":
        msg = {"role": "assistant", "content": None}
    else:
        msg = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    if not n_calls:
        return [msg]
    calls = [_call(ids.next_call(), pick(draw, TOOL_NAMES), draw(words_text(1, 40, False))) for _ in range(n_calls)]
    msg["tool_calls"] = calls
    results = [{"role": "tool", "tool_call_id": c["id"], "content": draw(tool_output(tiers))} for c in calls]
    return [msg, *draw(st.permutations(results))]


@st.composite
def final_answer(draw: st.DrawFn, ids: _Ids) -> Message:
    text = f"{ids.next_step()} {draw(words_text(1, 400, whitespace_heavy=False))}"
    if rarely(draw, 7):
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}
    return {"role": "assistant", "content": text}


@st.composite
def turn(draw: st.DrawFn, ids: _Ids, *, long: bool = False) -> list[Message]:
    msgs = [draw(user_message(ids))]
    kind = pick(draw, ["normal"] * 6 + ["interrupted", "unanswered"])
    if kind == "unanswered" and not long:
        return msgs  # the next user message follows directly (e.g. the user added something)
    if long:
        n_iter = draw(st.integers(20, 60))
        tiers = LONG_TURN_TIERS
    else:
        n_iter = draw(st.integers(0, 5))
        tiers = TIER_WEIGHTS
    for _ in range(n_iter):
        msgs += draw(iteration(ids, tiers))
    if kind != "interrupted" or n_iter == 0 or msgs[-1].get("role") == "assistant":
        msgs.append(draw(final_answer(ids)))
    return msgs


@st.composite
def transcripts(draw: st.DrawFn, max_turns: int = 6, long_turns: bool = True) -> list[Message]:
    """A whole recorded agent transcript (see the module docstring)."""
    ids = _Ids()
    msgs: list[Message] = []
    if draw(st.integers(0, 3)):
        msgs.append({"role": "system", "content": "You are a coding agent. " + draw(words_text(1, 400, False))})
    n_turns = draw(st.integers(1, max_turns))
    long_at = -1
    if long_turns and rarely(draw, 6):
        long_at = draw(st.integers(0, n_turns - 1))
    for i in range(n_turns):
        msgs += draw(turn(ids, long=(i == long_at)))
    return msgs


@st.composite
def long_turn_transcripts(draw: st.DrawFn) -> list[Message]:
    """A transcript that certainly holds one 20-60 iteration turn (plus a few ordinary turns)."""
    ids = _Ids()
    msgs: list[Message] = [{"role": "system", "content": "You are a coding agent."}]
    before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    for _ in range(before):
        msgs += draw(turn(ids))
    msgs += draw(turn(ids, long=True))
    for _ in range(after):
        msgs += draw(turn(ids))
    return msgs


# --------------------------------------------------------------------------- hook schedules

HOOKS = ["request", "turn", "turn_interrupted"]


@dataclass
class Scenario:
    """A transcript plus extra hook calls to interleave: ``extras[i]`` runs before message ``i`` is appended
    (``i == len(messages)`` means after the last one)."""

    messages: list[Message]
    extras: dict[int, list[str]] = field(default_factory=dict)


@st.composite
def scenarios(draw: st.DrawFn, max_turns: int = 6, long_turns: bool = True, max_extras: int = 8) -> Scenario:
    msgs = draw(transcripts(max_turns=max_turns, long_turns=long_turns))
    extras: dict[int, list[str]] = {}
    for pos, hook in draw(st.lists(st.tuples(st.integers(0, len(msgs)), st.sampled_from(HOOKS)), max_size=max_extras)):
        extras.setdefault(pos, []).append(hook)
    return Scenario(msgs, extras)


# --------------------------------------------------------------------------- configs

# Batch compaction (``Session.before_request`` runs it once the transcript reaches ``threshold`` of the context
# limit) rewrites the middle on its own terms: it prunes tool outputs and joins user messages. The micro
# properties keep it out of reach: threshold 1.0 of a 200K window that generated transcripts never fill,
# while ``target_ratio`` alone sizes the protected tail (``target_ratio * threshold * limit``) at 400-4000
# tokens, small enough for passes to happen.
ISOLATED_LIMIT = 200_000
TAIL_TOKENS = [1000, 400, 2000, 4000]


def isolated_config_data(tail_tokens: int = 1000, **compression: Any) -> dict[str, Any]:
    """Config data with micro-compaction on, batch compaction out of reach and a ``tail_tokens`` tail."""
    data = {
        "micro_compact": True,
        "threshold": 1.0,
        "target_ratio": tail_tokens / ISOLATED_LIMIT,
        "tokenizer": "estimate",
        **compression,
    }
    return {"compression": data, "model": {"context_length": ISOLATED_LIMIT}}


@st.composite
def micro_configs(draw: st.DrawFn, **fixed: Any) -> dict[str, Any]:
    """Config data with micro-compaction on and a small tail, so that passes actually happen."""
    compression = {
        "micro_compact_max_exchange_tokens": draw(st.sampled_from([256, 512, 1000, 2000, 8000])),
        "micro_compact_defrag_threshold_tokens": draw(st.sampled_from([200, 400, 2000])),
        "protect_first_n": draw(st.sampled_from([3, 0, 1, 2, 5])),
        "min_tail_messages": draw(st.sampled_from([3, 1, 2, 6])),
    }
    compression.update(fixed)
    return isolated_config_data(draw(st.sampled_from(TAIL_TOKENS)), **compression)


def units(messages: list[dict[str, Any]]) -> list[str]:
    """What identifies messages: tool call ids, tool result ids, assistant step tags (``s<n>:``)."""
    out: list[str] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            out.append(f"T:{m.get('tool_call_id')}")
        elif role == "assistant" and not is_marker(m):
            out += [f"S:{n}" for n in STEP_TAG.findall(content_text(m))[:1]]
            out += [f"C:{tc.get('id')}" for tc in m.get("tool_calls") or ()]
        elif role == "user":
            out.append("USER")
    return out


def head_of(messages: list[dict[str, Any]], config: Any, counter: Any) -> int:
    """The protected head's end as the engines compute it (``protect_first_n`` within the head budget),
    for a message list without cached counts (the input as appended)."""
    from microcompact.window import head_end

    n = config.compression.protect_first_n
    plain = head_end(messages, n)
    return head_end(messages, n, [counter.count_message(m) for m in messages[:plain]], config.head_budget_tokens())


def is_cut(message: dict[str, Any]) -> bool:
    """A message the last resort cut head-and-tail (its original is in the store)."""
    meta = message.get("_mc")
    return isinstance(meta, dict) and bool(meta.get("cut"))


def same_head(out: list[dict[str, Any]], src: list[dict[str, Any]], h: int) -> bool:
    """``out[:h]`` is ``src[:h]``, metadata aside; a message cut by the last resort only keeps its place."""
    if len(out) < h:
        return False
    for o, m in zip(out[:h], src[:h], strict=False):
        if is_cut(o):
            if (o.get("role"), o.get("tool_call_id")) != (m.get("role"), m.get("tool_call_id")):
                return False
        elif {k: v for k, v in o.items() if not k.startswith("_")} != m:
            return False
    return True
