"""The facts a summary must never lose, kept deterministically beside (or instead of) model prose.

One API over small modules: :mod:`.facts_model` (the values and how they merge), :mod:`.facts_extract`
(reading files, failures and test runs out of messages), :mod:`.facts_lessons` (what each tool result
taught: symbols, hits, errors, tests, ids), :mod:`.facts_text` and :mod:`.facts_taught` (the marker
sections they are written as, and read back from). Any summarizer can keep the facts of what it absorbed::

    block = facts_block(previous_summary, exchange, budget_tokens)
    summary = with_facts(model_prose, block)

The ledger's budget scales with the defrag threshold (:func:`ledger_budget`) and is its own: the prose is
defragmented against the threshold, the ledger compressed to its budget at every merge, so the rolling
summary keeps room for prose however many files the session touches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..config import LEDGER_MULTIPLE
from ..identifiers import identifiers
from ..messages import Message
from ..tokens import EstimateCounter
from .base import CountText
from .facts_extract import extract_file_facts
from .facts_lessons import extract_lessons
from .facts_model import CHANGED, Facts, Failure, FileFact, FolderFact, TestRun, mark_used, merge_facts
from .facts_text import LEDGER_HEADINGS, compress_facts, parse_facts, render_facts, strip_facts

__all__ = [
    "CHANGED",
    "LEDGER_HEADINGS",
    "Facts",
    "Failure",
    "FileFact",
    "FolderFact",
    "TestRun",
    "compress_facts",
    "extract_facts",
    "facts_block",
    "ledger_budget",
    "merge_facts",
    "merge_into",
    "parse_facts",
    "render_facts",
    "strip_facts",
    "with_facts",
]


def extract_facts(messages: Iterable[Message]) -> Facts:
    """Everything ``messages`` show that the ledger keeps: files, failures, test runs, what tools taught."""
    messages = list(messages)
    facts = extract_file_facts(messages)
    facts.taught, facts.mentioned = extract_lessons(messages)
    return facts


def ledger_budget(defrag_threshold_tokens: int) -> int:
    """Tokens the ledger may take in a rolling summary that is defragmented above ``defrag_threshold_tokens``."""
    return LEDGER_MULTIPLE * defrag_threshold_tokens


def facts_block(
    previous_summary_text: str | None,
    messages: Sequence[Message],
    budget_tokens: int,
    count_text: CountText | None = None,
) -> str:
    """The ledger sections of ``previous_summary_text`` updated with what ``messages`` did, within
    ``budget_tokens`` (never dropping a changed file); "" when there are no facts at all."""
    merged = merge_into(previous_summary_text or "", extract_facts(messages))
    return render_facts(compress_facts(merged, budget_tokens, count_text or EstimateCounter().count))


def merge_into(previous_summary_text: str, new: Facts) -> Facts:
    """The ledger of ``previous_summary_text`` merged with ``new``, the new lessons' values that the previous
    summary's prose names counted as used: folding by use absorbs a result the agent kept using after the
    replies that used it (they were absorbed first, while it stayed in place), so those replies' mentions
    reach the ledger only through the prose that summarized them."""
    prose = strip_facts(previous_summary_text) if previous_summary_text else ""
    if prose and new.taught:
        said = identifiers(prose)
        new.taught = [mark_used(lesson, frozenset(said)) for lesson in new.taught]
    return merge_facts(parse_facts(previous_summary_text), new)


def with_facts(summary_text: str, block: str) -> str:
    """``summary_text`` with its ledger sections (if any, e.g. a model's rewrite of them) replaced by
    ``block``, which goes last."""
    prose = strip_facts(summary_text)
    return "\n\n".join(part for part in (prose, block.strip()) if part)
