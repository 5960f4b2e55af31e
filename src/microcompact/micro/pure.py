"""``micro_compact()``: one micro pass as a pure function (a message list in, a new message list out), for
callers with their own loop, in the shape of a history processor."""

from __future__ import annotations

from ..config import Config
from ..messages import Message
from ..summarizers import Summarizer
from ..tokens import TOKENS_KEY, Ledger, TokenCounter, make_text_counter
from .engine import MicroCompactor
from .policy import PassMode
from .state import RollingSummary


def micro_compact(
    messages: list[Message],
    summarizer: Summarizer,
    *,
    config: Config | None = None,
    state: RollingSummary | None = None,
    counter: TokenCounter | None = None,
) -> list[Message]:
    """One pass in the history-processor shape: a message list in, a new message list out.

    The caller's dicts are never changed. Pass the same ``state`` on every call to keep the cursor and
    summary between calls (without it they are recovered from the last marker). Counting the transcript
    costs O(n) per call here; long-running loops should use :class:`~microcompact.session.Session`, which
    counts each message once.
    """
    config = config or Config()
    if not config.compression.micro_compact:
        config = config.with_overrides(compression={"micro_compact": True})
    counter = counter or TokenCounter(make_text_counter(config.compression.tokenizer))
    ledger = Ledger(counter, [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in messages])
    engine = MicroCompactor(config, summarizer, counter, state=state)
    engine.run_pass(ledger, PassMode.TURN)
    # Markers keep their ``_mc`` metadata (so the next call recognises them); send ``to_api(result)``.
    return [{k: v for k, v in m.items() if k != TOKENS_KEY} for m in ledger.messages]
