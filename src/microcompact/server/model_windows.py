"""The config a conversation's session gets: the window of its request's model, and a threshold it can reach.

One ``serve`` faces several agents on several models, so the window comes from each request's ``model``
(:mod:`microcompact.windows`). A request whose fixed part (system prompt and tool schemas, which no
compaction can shorten) is already above the batch threshold could never get under it: every request
would run a batch pass that ends ``still_over_threshold`` (Qwen Code: 6.9K + 9.8K tokens against a 16K
threshold at 32K). Such a conversation's threshold is moved to the same share of the room the fixed part
leaves, so batch compaction works on the history it can change, and the proxy says so once per model and
window with what would help.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import orjson

from ..config import Config
from ..messages import Message
from ..tokens import TokenCounter, make_text_counter
from ..windows import Windows

log = logging.getLogger("microcompact")

SYSTEM_ROLES = ("system", "developer")


def fixed_text(fields: Sequence[str], body: dict[str, Any], history: Sequence[Message]) -> str:
    """What every request of a conversation repeats and no compaction changes: tool schemas, the system
    prompt (``fields`` of the body, the provider's ``fixed_fields``: Anthropic's ``system``, Responses'
    ``instructions``, Gemini's ``systemInstruction``; or the system messages of the history)."""
    fixed = [body.get(k) for k in fields if body.get(k)]
    fixed += [m for m in history if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES]
    if not fixed:
        return ""
    try:
        return orjson.dumps(fixed).decode()
    except (TypeError, orjson.JSONEncodeError):
        return str(fixed)


def reachable_threshold(share: float, window: int, fixed: int) -> float:
    """The threshold share of ``window`` to use when ``fixed`` tokens are always sent: ``share`` when the
    fixed part is below ``share * window``, else the same share of the room it leaves (1.0 when it leaves
    none: only the hard limit's last resort can act)."""
    if fixed < share * window:
        return share
    if fixed >= window:
        return 1.0
    return min(1.0, (fixed + share * (window - fixed)) / window)


class ModelWindows:
    """Configs by (window, threshold), derived once from the router's, and the once-only reports."""

    def __init__(self, base: Config) -> None:
        self.base = base
        self.windows = Windows(dict(base.models), base.model.context_length)
        self.counter = TokenCounter(make_text_counter(base.compression.tokenizer))
        self._configs: dict[tuple[int, float], Config] = {}
        self._reported: set[tuple[str, int]] = set()
        self._counted: dict[str, int] = {}  # fixed text -> its tokens (an agent repeats the same one)
        self._lock = threading.Lock()

    def config_for(self, fields: Sequence[str], body: dict[str, Any], history: Sequence[Message]) -> Config:
        """The config a new session of this request's conversation gets (``fields``: the provider's
        ``fixed_fields``)."""
        model = body.get("model") if isinstance(body.get("model"), str) else None
        window = self.windows.window(model)
        share = self.base.compression.threshold
        fixed = self._fixed_tokens(fixed_text(fields, body, history))
        adjusted = reachable_threshold(share, window, fixed)
        if adjusted != share:
            self._report(model or "(no model)", window, fixed, share)
        key = (window, round(adjusted, 4))
        with self._lock:
            config = self._configs.get(key)
        if config is None:
            config = self.base.with_overrides(
                source=f"the window of {model or 'an unnamed model'}",
                model={"context_length": window},
                compression={"threshold": key[1]} if adjusted != share else {},
            )
            with self._lock:
                self._configs[key] = config
        return config

    def _fixed_tokens(self, text: str) -> int:
        with self._lock:
            known = self._counted.get(text)
        if known is not None:
            return known
        tokens = self.counter.count_text(text) if text else 0
        with self._lock:
            if len(self._counted) >= 256:
                self._counted.clear()
            self._counted[text] = tokens
        return tokens

    def _report(self, model: str, window: int, fixed: int, share: float) -> None:
        with self._lock:
            if (model, window) in self._reported:
                return
            self._reported.add((model, window))
        log.warning(
            "Proxy: %s requests carry about %s tokens that no compaction can shorten (system prompt and tool "
            "schemas), above the batch threshold of %s (%.0f%% of a %s-token window): compaction works on "
            "the history only, with its threshold moved to %.0f%% of the room left. A larger --context-limit "
            "(if the model's window is larger), a models: entry for %s, or a higher compression.threshold "
            "would leave the history more room",
            model,
            f"{fixed:,}",
            f"{int(share * window):,}",
            share * 100,
            f"{window:,}",
            share * 100,
            model,
        )
