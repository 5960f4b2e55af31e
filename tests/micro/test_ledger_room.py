"""The ledger's room of its own: larger than the defrag threshold on a large window, never counted against it
(defrag condenses prose only), and small on a small window where the history needs the room."""

from __future__ import annotations

import pytest

from microcompact.config import parse_config
from microcompact.micro.defrag import Defrag
from microcompact.micro.state import Refusal
from microcompact.summarizers import ExtractiveSummarizer
from microcompact.summarizers.facts import Facts, FileFact, render_facts
from microcompact.tokens import EstimateCounter, TokenCounter


@pytest.mark.parametrize(("window", "room"), [(32_000, 500), (60_000, 1_757), (200_000, 8_000), (1_000_000, 8_000)])
def test_the_ledger_room_grows_with_the_window(window: int, room: int) -> None:
    config = parse_config({"model": {"context_length": window}})
    assert config.ledger_room_tokens() == room
    assert config.ledger_room_tokens() >= config.summary_room_tokens() // 2


def _defrag(threshold: int) -> tuple[Defrag, TokenCounter]:
    config = parse_config({"compression": {"micro_compact_defrag_threshold_tokens": threshold}})
    counter = TokenCounter(EstimateCounter())
    return Defrag(config, ExtractiveSummarizer(), counter, lambda: 0.0, Refusal()), counter


def test_a_ledger_over_the_threshold_does_not_defrag_but_prose_does() -> None:
    defrag, counter = _defrag(200)
    facts = Facts()
    for i in range(60):
        facts.touch(FileFact(f"/w/app/lib/mod_{i}.ex", "edited", 1, ""))
    ledger = render_facts(facts)
    short_prose = "### Findings\n- the fixture is async"
    summary = f"{short_prose}\n\n{ledger}"
    assert counter.count_text(ledger) > 200 < counter.count_text(summary)
    assert not defrag.needs_defrag(summary)  # the ledger alone: compressed at every merge, never condensed
    findings = (f"- finding number {i} about the fixture and the upsert" for i in range(60))
    long_prose = "### Findings\n" + "\n".join(findings)
    assert defrag.needs_defrag(f"{long_prose}\n\n{ledger}")
    condensed = defrag.condense(f"{long_prose}\n\n{ledger}")
    assert condensed.new is not None and "mod_59.ex" in condensed.new and "mod_0.ex" in condensed.new
    assert not defrag.needs_defrag(condensed.new)  # converges: one defrag, then none until the prose grows


def test_asked_again_with_the_same_summary_defrag_counts_nothing() -> None:
    config = parse_config({"compression": {"micro_compact_defrag_threshold_tokens": 200}})
    counted: list[str] = []

    class Spy(EstimateCounter):
        def count(self, text: str) -> int:
            counted.append(text)
            return super().count(text)

    defrag = Defrag(config, ExtractiveSummarizer(), TokenCounter(Spy()), lambda: 0.0, Refusal())
    prose = "### Findings\n" + "\n".join(f"- finding number {i} about the upsert" for i in range(60))
    assert defrag.needs_defrag(prose) and counted
    counted.clear()
    assert defrag.needs_defrag(prose) and not counted  # every pass asks with the summary it asked last time
    assert not defrag.needs_defrag("### Findings\n- short") and counted  # another summary is counted
