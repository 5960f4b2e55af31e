"""The ledger under pressure: values the agent mentioned outrank the names of files only read, so the
facts a decay run plants survive however many read-only files pile up in the ledger."""

from __future__ import annotations

import hashlib

from microcompact.summarizers.facts import compress_facts, render_facts
from microcompact.summarizers.facts_model import Facts, FileFact, ItemKind, Lesson, ToolKind
from microcompact.summarizers.facts_taught import compress_lessons, render_lessons, used_cost
from microcompact.tokens import EstimateCounter, TiktokenCounter

estimate = EstimateCounter().count


def planted(k: int) -> str:
    return f"ledger_key_{k:02d}_{hashlib.sha256(str(k).encode()).hexdigest()[:8]}"


def crowded(facts: int = 20, logs: int = 130) -> Facts:
    """``facts`` reads whose one value the agent mentioned, and ``logs`` read-only logs with ids."""
    files = {f"notes/part{k}.txt": FileFact(f"notes/part{k}.txt", "read", gist="3 lines") for k in range(facts)}
    files |= {f"data/batch_{n}.log": FileFact(f"data/batch_{n}.log", "read", gist="653 lines") for n in range(logs)}
    taught = [Lesson(ToolKind.READ, f"notes/part{k}.txt", "", {ItemKind.USED: [planted(k)]}) for k in range(facts)]
    taught += [
        Lesson(ToolKind.READ, f"data/batch_{n}.log", "", {ItemKind.ID: [f"{n:04x}deadbeef{j}" for j in range(3)]})
        for n in range(logs)
    ]
    return Facts(files=files, taught=taught)


def test_mentioned_values_keep_their_room_from_the_names_of_files_only_read() -> None:
    count = TiktokenCounter().count
    facts = crowded()
    budget = 1000
    assert used_cost(facts.taught, count) < 0.6 * budget  # room enough, if read-only names give way
    text = render_facts(compress_facts(facts, budget, count))
    assert [k for k in range(20) if planted(k) not in text] == []
    assert count(text) <= budget
    assert "data/ — 130 read or searched" in text  # the folder is still counted, its names went


def test_mentioned_values_fit_exactly_where_the_files_leave_them_room() -> None:
    """As a decay run first lost one (o200k counts, 1000 tokens): 19 mentioned values, 24 logs read once,
    one log's ids. The room kept for the values must be what the ranking then finds left."""
    count = TiktokenCounter().count
    files = {f"notes/part{k}.txt": FileFact(f"notes/part{k}.txt", "read", gist="3 lines") for k in range(1, 20)}
    files |= {f"data/batch_{n}.log": FileFact(f"data/batch_{n}.log", "read", gist="653 lines") for n in range(21, 45)}
    taught = [Lesson(ToolKind.READ, f"notes/part{k}.txt", "", {ItemKind.USED: [planted(k)]}) for k in range(1, 20)]
    taught.append(Lesson(ToolKind.READ, "data/batch_44.log", "", {ItemKind.ID: ["e83763df0a55", "46bd946be881"]}))
    text = render_facts(compress_facts(Facts(files=files, taught=taught), 1000, count))
    assert [k for k in range(1, 20) if planted(k) not in text] == []
    assert count(text) <= 1000


def test_without_pressure_folders_keep_their_names() -> None:
    facts = crowded(facts=2, logs=6)
    text = render_facts(compress_facts(facts, 300, estimate))
    assert all(planted(k) in text for k in range(2))
    assert "batch_5.log" in text


def test_used_cost_covers_what_the_ranking_spends_on_the_used_items() -> None:
    facts = crowded(facts=20, logs=0)
    lessons = facts.taught
    rendered = estimate(
        "\n".join(
            ["### What tools showed", *(f"- read `{x.subject}`: used {x.items[ItemKind.USED][0]}" for x in lessons)]
        )
    )
    assert used_cost(lessons, estimate) >= rendered
    assert used_cost([Lesson(ToolKind.READ, "a.py", "", {ItemKind.SYMBOL: ["f"]})], estimate) == 0


def test_folders_keep_their_newest_names() -> None:
    """The room for mentioned values never costs a folder's newest names nor a file's own line (what the
    fidelity bench's marker must still name)."""
    count = TiktokenCounter().count
    facts = crowded()
    facts.files["src/app.py"] = FileFact("src/app.py", "read", gist="defines Registry, start_link")
    text = render_facts(compress_facts(facts, 1000, count))
    assert [k for k in range(20) if planted(k) not in text] == []
    assert "app.py" in text
    assert all(f"batch_{n}.log" in text for n in range(122, 130))  # the newest eight
    assert "batch_0.log" not in text and "653 lines" not in text


def test_without_mentioned_values_read_files_keep_their_sizes() -> None:
    files = {f"data/batch_{n}.log": FileFact(f"data/batch_{n}.log", "read", gist="653 lines") for n in range(40)}
    taught = [Lesson(ToolKind.READ, "data/batch_1.log", "", {ItemKind.ID: ["0001deadbeef0"]})]
    text = render_facts(compress_facts(Facts(files=files, taught=taught), 2000, estimate))
    assert text.count("653 lines") == 40


def test_the_ids_of_an_output_the_agent_quoted_from_rank_with_what_it_quoted() -> None:
    """A step's key quoted at once and its id needed 8 steps on (the reactive agent of issue 26): under
    pressure a step's id goes with its quoted key, newest steps first, not before every older key."""
    count = TiktokenCounter().count
    steps = [
        Lesson(ToolKind.COMMAND, f"run step {k}", "", {ItemKind.USED: [planted(k)], ItemKind.ID: [f"{k:04x}cafe0{k}"]})
        for k in range(20)
    ]
    text = render_lessons(compress_lessons(steps, 300, count))
    kept = [k for k in range(20) if planted(k) in text]
    assert 0 < len(kept) < 20 and 19 in kept
    assert [k for k in kept if f"{k:04x}cafe0{k}" not in text] == []
