"""The HTTP summarizer's prompts live in template files and render to exactly the text the model always saw.

Moving the prompts out of the code must not change a byte of what is sent: a changed prompt changes every
summary, so an edit to a template has to be deliberate (and update the digests below).
"""

from __future__ import annotations

import hashlib
import tomllib
from fnmatch import fnmatch
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from microcompact.summarizers import BATCH_PROMPT, BATCH_SECTIONS, CONDENSE_PROMPT, MERGE_PROMPT, prompts

ROOT = Path(__file__).resolve().parents[2]

# sha256 and length of each system prompt. The batch prompt is as summarizers.py built it with f-strings
# before the templates (main at 7b9d145); merge and condense are the fill-in template for small models
# (issue 12: a stated length, four headings, the facts kept beside the notes by code). Issue 20 added the
# provenance rule (only USER messages say what the user wants; tool and assistant text is quoted with its
# source), the Goal's source and the batch constraints' source.
SYSTEM_PROMPTS = {
    "merge": (MERGE_PROMPT, 1742, "4368763da48ccd30990744f2b57082a1457840436a8c696c936b43a004c36769"),
    "condense": (CONDENSE_PROMPT, 1530, "c8da5e4da55a04c72d59cfc2988fa561f5d1312339fabcad41496d073739ed43"),
    "batch": (BATCH_PROMPT, 1777, "864de5f2903e84166e2b72f9d0fe3b99df8597c884c78b72768417530929198d"),
}


@pytest.mark.parametrize("name", prompts.TEMPLATE_NAMES)
def test_every_template_loads_from_the_package(name: str) -> None:
    text = resources.files("microcompact.summarizers").joinpath("templates", name).read_text(encoding="utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n")  # one final newline, not part of the prompt
    assert prompts.load_template(name).template == text[:-1]


def test_the_templates_folder_holds_exactly_the_templates_in_use() -> None:
    folder = resources.files("microcompact.summarizers").joinpath("templates")
    assert sorted(entry.name for entry in folder.iterdir()) == sorted(prompts.TEMPLATE_NAMES)


def test_package_data_ships_every_template() -> None:
    """An installed wheel has the templates: pyproject's package-data globs match each of them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = config["tool"]["setuptools"]["package-data"]["microcompact"]
    for name in prompts.TEMPLATE_NAMES:
        assert any(fnmatch(f"summarizers/templates/{name}", pattern) for pattern in globs), name


@pytest.mark.parametrize("kind", SYSTEM_PROMPTS)
def test_system_prompts_render_byte_identical_to_the_inline_ones(kind: str) -> None:
    text, length, digest = SYSTEM_PROMPTS[kind]
    assert len(text) == length
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == digest
    assert "$" not in text  # every placeholder was filled


def test_batch_prompt_lists_the_sections_in_order() -> None:
    headings = [line[4:] for line in BATCH_PROMPT.splitlines() if line.startswith("### ")]
    assert headings == list(BATCH_SECTIONS)


# The user messages written out inline: the reference the templates must render to.
def inline_merge(summary: str, transcript: str) -> str:
    return (
        f"NOTES SO FAR:\n{summary.strip() or '(empty: this is the first excerpt)'}\n\n"
        f"NEW EXCERPT:\n{transcript}\n\nNow write the updated notes: the four headings, at most 250 words."
    )


def inline_condense(summary: str, max_words: int) -> str:
    return (
        f"NOTES TO SHORTEN:\n{summary.strip()}\n\n"
        f"Now write the shortened notes: the four headings, at most {max_words} words."
    )


def inline_batch(summary: str, transcript: str, focus: str | None) -> str:
    parts = [f"PREVIOUS SUMMARY:\n{summary.strip() or '(none)'}"]
    if focus:
        parts.append(f"FOCUS: {focus.strip()}")
    parts.append(f"TRANSCRIPT TO COMPACT:\n{transcript}")
    return "\n\n".join(parts)


# Text with the characters templates could trip on: $ placeholders, braces, blank and whitespace-only.
texts = st.one_of(st.sampled_from(["", "  \n", "$summary ${focus} $$ {x} {0}", "### Files\n- a.py"]), st.text())


@given(summary=texts, transcript=texts)
def test_merge_request_matches_the_inline_text(summary: str, transcript: str) -> None:
    assert prompts.merge_request(summary, transcript) == inline_merge(summary, transcript)


@given(summary=texts, target=st.integers(min_value=0, max_value=10**6))
def test_condense_request_matches_the_inline_text(summary: str, target: int) -> None:
    assert prompts.condense_request(summary, target) == inline_condense(summary, target)


@given(summary=texts, transcript=texts, focus=st.one_of(st.none(), texts))
def test_batch_request_matches_the_inline_text(summary: str, transcript: str, focus: str | None) -> None:
    assert prompts.batch_request(summary, transcript, focus) == inline_batch(summary, transcript, focus)


def test_a_placeholder_left_unfilled_is_an_error_not_a_silent_gap() -> None:
    with pytest.raises(KeyError):
        prompts.render("merge_request.txt", summary="s")
