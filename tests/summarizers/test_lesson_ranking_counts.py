"""Ranking what tools showed into its room counts each text once: the same lessons as ranking from scratch
at every retry (the plain recursion below, the rule as the module doc states it), with far fewer counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from microcompact.summarizers.facts_model import TIER, ItemKind, Lesson, ToolKind
from microcompact.summarizers.facts_taught import TAUGHT, compress_lessons, render_lesson, render_lessons, taught_root
from microcompact.tokens import EstimateCounter
from support.strategies import examples

estimate = EstimateCounter().count


def ranked_from_scratch(lessons: list[Lesson], budget: int, count: Callable[[str], int]) -> list[Lesson]:
    """Every retry ranks and counts everything again."""
    if not lessons or count(render_lessons(lessons)) <= budget:
        return lessons
    ranked = sorted(
        (
            (
                TIER[ItemKind.USED if kind is ItemKind.ID and lesson.items.get(ItemKind.USED) else kind],
                -n,
                i,
                n,
                kind,
                value,
            )
            for n, lesson in enumerate(lessons)
            for kind, values in lesson.items.items()
            for i, value in enumerate(values)
        ),
        key=lambda r: r[:3],
    )
    root = taught_root(lessons)
    spent = count(f"### {TAUGHT} under {root}") + 1
    chosen: set[tuple[int, ItemKind, str]] = set()
    seen: set[str] = set()
    opened: set[int] = set()
    for _, _, _, n, kind, value in ranked:
        if value in seen:
            continue
        cost = count(value) + 1
        if n not in opened:
            cost += count(render_lesson(replace(lessons[n], items={}), root)) + 2
        if spent + cost > budget:
            continue
        spent += cost
        seen.add(value)
        opened.add(n)
        chosen.add((n, kind, value))
    out = []
    for n, lesson in enumerate(lessons):
        items = {k: [v for v in vs if (n, k, v) in chosen] for k, vs in lesson.items.items()}
        items = {k: vs for k, vs in items.items() if vs}
        if items:
            out.append(replace(lesson, items=items))
    over = count(render_lessons(out)) - budget
    if over > 0:
        return ranked_from_scratch(lessons, budget - over, count) if budget > over else []
    return out


values = st.lists(
    st.sampled_from(["end_session", "pane_id", "Registry", "a/b.py:12", "x", "** (KeyError) k"]), max_size=6
)
lesson = st.builds(
    Lesson,
    st.sampled_from([ToolKind.READ, ToolKind.COMMAND, ToolKind.SEARCH]),
    st.sampled_from(["/w/lib/a.ex", "/w/lib/b.ex", "/w/c.py", "mix test"]),
    st.sampled_from(["", "exit 1"]),
    st.dictionaries(st.sampled_from(list(ItemKind)), values, max_size=4),
)


@settings(max_examples=examples(80), deadline=None)
@given(lessons=st.lists(lesson, max_size=8), budget=st.integers(0, 120))
def test_the_same_lessons_as_ranking_from_scratch(lessons: list[Lesson], budget: int) -> None:
    assert compress_lessons(lessons, budget, estimate) == ranked_from_scratch(lessons, budget, estimate)


def test_each_text_is_counted_once_however_many_retries() -> None:
    lessons = [
        Lesson(ToolKind.READ, f"/w/lib/m{i}.ex", "", {ItemKind.NAME: [f"name_{i}_{j}" for j in range(12)]})
        for i in range(20)
    ]
    counted: Counter[str] = Counter()

    def count(text: str) -> int:
        counted[text] += 1
        return estimate(text) + text.count(",")  # separators the estimate leaves out: forces retries

    kept = compress_lessons(lessons, 150, count)
    assert kept == ranked_from_scratch(lessons, 150, estimate_with_commas)
    assert kept and max(counted.values()) == 1


def estimate_with_commas(text: str) -> int:
    return estimate(text) + text.count(",")
