"""What a rule of the compaction contract is: the one shape every module of :mod:`microcompact.properties` has."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..messages import Message


@runtime_checkable
class Rule(Protocol):
    """One property every pass keeps, answering both questions the package loops over.

    ``allows_cut``: may a cut (the boundary before ``messages[index]``) go there; span selection asks every
    rule. ``errors``: what an output breaks going from ``before`` to ``after`` (empty when the rule holds);
    the contract check asks every rule. A rule that answers one question and not the other cannot be
    written, so "where may a cut go" and "what is broken" never drift apart.
    """

    name: str

    def allows_cut(self, messages: Sequence[Message], index: int) -> bool: ...

    def errors(self, before: Sequence[Message], after: Sequence[Message]) -> list[str]: ...
