"""Context windows by model name: one ``serve`` faces several agents on several models at once.

The window a conversation is compacted for comes from its request's ``model``: the built-in table below
(prompt-side limits in tokens, as the providers' model pages state them), extended or overridden by the
config's ``models:`` section, matched on the longest entry that starts the normalised name (so dated
snapshots such as ``claude-sonnet-4-5-20250929`` and ``gpt-4o-2024-08-06`` find their family). A model
nobody knows gets the default window: ``--context-limit`` (or ``model.context_length``) when given, else
:data:`DEFAULT_WINDOW`. ``--context-limit`` is also a cap: no model's window is taken above it (an
account, a gateway or a local deployment may allow less than the model's page says).

Pure data and lookups; nothing is ever fetched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Name prefixes -> prompt tokens. Longest prefix wins, so a specific entry beats its family.
BUILTIN_WINDOWS: dict[str, int] = {
    # Anthropic: the 5-series families (Fable, Mythos, Opus, Sonnet at 1M; Haiku at 200K) and the older ones.
    "claude-fable-5": 1_000_000,
    "claude-mythos-5": 1_000_000,
    "claude-opus-5": 1_000_000,
    "claude-sonnet-5": 1_000_000,
    "claude-haiku-5": 200_000,
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-3": 200_000,
    "claude-2": 100_000,
    "claude": 200_000,
    # OpenAI
    "gpt-5": 272_000,  # 400K in all, of which 272K input
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4.5": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-mini": 200_000,
    # Google
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-2": 1_048_576,
    "gemini-3": 1_048_576,
}

# The window of a model the table and the config do not know, when no --context-limit is given.
DEFAULT_WINDOW = 128_000


def normalised(model: str) -> str:
    """The model name as the table spells it: lower case, without a provider route (``openai/``,
    ``anthropic.``, ``models/``) or a Claude Code ``[1m]`` suffix."""
    name = model.strip().lower()
    name = name.rsplit("/", 1)[-1]
    if name.startswith("anthropic."):
        name = name.removeprefix("anthropic.")
    return name.split("[", 1)[0]


@dataclass(frozen=True)
class Windows:
    """The window for each model: the table plus ``overrides`` (the config's ``models:``), capped and
    defaulted by ``limit`` (``--context-limit``)."""

    overrides: Mapping[str, int]
    limit: int | None = None

    def lookup(self, model: str | None) -> int | None:
        """The window the table or the config gives ``model`` (uncapped), or None for an unknown model."""
        if not isinstance(model, str) or not model.strip():
            return None
        name = normalised(model)
        for table in ({normalised(k): v for k, v in self.overrides.items()}, BUILTIN_WINDOWS):
            best = max((k for k in table if name.startswith(k)), key=len, default=None)
            if best is not None:
                return table[best]
        return None

    def window(self, model: str | None) -> int:
        """The window to compact ``model``'s conversations for."""
        known = self.lookup(model)
        if known is None:
            return self.limit or DEFAULT_WINDOW
        return min(known, self.limit) if self.limit else known

    def describe(self) -> str:
        """One line for ``serve``'s startup: which window applies to whom."""
        extra = f", {len(self.overrides)} from the config's models:" if self.overrides else ""
        if self.limit:
            return (
                f"context window per request model (built-in table{extra}), capped at --context-limit "
                f"{self.limit:,}; unknown models: {self.limit:,}"
            )
        return (
            f"context window per request model (built-in table{extra}); unknown models: {DEFAULT_WINDOW:,} "
            "(set --context-limit to change it; it also caps every window)"
        )
