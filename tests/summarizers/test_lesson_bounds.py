"""What tools taught stays bounded on long outputs: thousands of numbered lines teach nothing by
themselves, a read's line numbers are not names, candidates are capped per result, and a number the agent
went on to write is still kept under ``used``."""

from __future__ import annotations

import json
from typing import Any

from microcompact.summarizers.extractive import ExtractiveSummarizer
from microcompact.summarizers.facts import extract_facts, facts_block
from microcompact.summarizers.facts_lessons import CANDIDATES, NUMBER_NAMES, frequent_identifiers, identifiers_held
from microcompact.summarizers.facts_model import ItemKind
from microcompact.summarizers.facts_taught import TAUGHT


def step(n: int, name: str, args: dict[str, Any], result: str, text: str = "") -> list[dict[str, Any]]:
    call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return [
        {"role": "assistant", "content": text, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": result},
    ]


def seq(n: int, lines: int = 3000) -> list[dict[str, Any]]:
    first = n * 1_000_000 + 1
    output = "\n".join(str(i) for i in range(first, first + lines))
    return step(n, "Bash", {"command": f"seq {first} {first + lines - 1}"}, output, f"Step {n}.")


def test_an_output_of_3000_numbered_lines_teaches_nothing_by_itself() -> None:
    assert extract_facts(seq(1)).taught == []
    assert TAUGHT not in facts_block(None, seq(1), 1000)


def test_twenty_folds_of_numbered_outputs_keep_the_marker_small() -> None:
    summarizer, summary = ExtractiveSummarizer(), ""
    for n in range(1, 21):
        summary = summarizer.merge(summary, seq(n))
    assert TAUGHT not in summary
    assert len(summary) < 1000  # the commands section's ten newest lines, no list of numbers


def test_a_number_the_agent_wrote_afterwards_is_kept_as_used() -> None:
    messages = [*seq(1), {"role": "assistant", "content": "The one to keep is 1001500."}]
    (lesson,) = extract_facts(messages).taught
    assert lesson.items == {ItemKind.USED: ["1001500"]}


def test_plain_numbers_beside_text_are_a_few_names_at_most() -> None:
    output = "\n".join(f"worker_{i % 3} finished job {40000 + i}" for i in range(3000))
    (lesson,) = extract_facts(step(1, "Bash", {"command": "./jobs"}, output)).taught
    names = lesson.items[ItemKind.NAME]
    assert names[:3] == ["worker_0", "worker_1", "worker_2"]
    assert [x for x in names if x.isdigit()] == ["40000", "40001", "40002", "40003"][:NUMBER_NAMES]


def test_a_reads_line_numbers_are_not_names() -> None:
    output = "\n".join(f"{i:>6}→    total_{i % 7} = compute(row)" for i in range(1, 3001))
    (lesson,) = extract_facts(step(1, "Read", {"file_path": "/w/big.py"}, output)).taught
    names = lesson.items[ItemKind.NAME]
    assert names and not any(x.isdigit() for x in names)
    assert "total_0" in names


def test_candidates_per_result_are_capped_at_the_first_found() -> None:
    lines = [f"value_{i} ok" for i in range(3 * CANDIDATES)]
    names = frequent_identifiers(lines)
    assert names and set(names) <= {f"value_{i}" for i in range(CANDIDATES)}
    assert frequent_identifiers([*lines, "value_0 again"])[0] == "value_0"  # counted after the cap too


def test_identifiers_held_are_identifiers_not_substrings_of_longer_tokens() -> None:
    text = "pid 123456789\nport 40213 open\nsrc/app/session.py:12: error"
    assert identifiers_held(text, {"1234567", "40213", "session.py", "other_name"}) == {"40213", "session.py"}


def test_a_long_commands_lesson_names_it_in_60_characters_and_keeps_its_values() -> None:
    command = 'seq 77000001 77000250; echo "id of step 77: $(printf %s r8-77-id | sha256sum)"; seq 77000251 77000500'
    output = "77000001\nid of step 77: c61452040effa6b0\n77000500"
    messages = [
        *step(1, "Bash", {"command": command}, output),
        {"role": "assistant", "content": "Key c61452040effa6b0."},
    ]
    (lesson,) = extract_facts(messages).taught
    assert len(lesson.subject) == 60 and lesson.subject.endswith("…")
    assert command.startswith(lesson.subject[:-1])
    assert lesson.items[ItemKind.USED] == ["c61452040effa6b0"]
