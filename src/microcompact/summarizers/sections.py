"""The shape of a summary: ``###`` section headings with ``-`` bullets, parsed and rendered back."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Section:
    heading: str  # the heading line as written ("" for text before the first heading)
    items: list[str] = field(default_factory=list)  # bullet texts without the list marker

    @property
    def name(self) -> str:
        """The heading's words, lowercased, without markdown: how sections are matched."""
        return self.heading.strip().lstrip("#").strip().strip("*").rstrip(":").strip().lower()


HEADING = re.compile(r"^\s*(?:#{1,6}\s+\S.*|\*\*[^*]+\*\*:?)\s*$")
LIST_MARKER = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")


def parse_sections(summary: str) -> list[Section]:
    """Headings and their bullets; prose lines count as bullets, blank lines are dropped."""
    sections = [Section("")]
    for line in summary.splitlines():
        if not line.strip():
            continue
        if HEADING.match(line):
            sections.append(Section(line.strip()))
        else:
            sections[-1].items.append(LIST_MARKER.sub("", line).strip())
    return [s for s in sections if s.heading or s.items]


def render_sections(sections: Iterable[Section]) -> str:
    blocks = []
    for section in sections:
        lines = [section.heading] if section.heading else []
        lines += [f"- {item}" for item in section.items]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def clip(text: str, limit: int) -> str:
    """One line, at most ``limit`` characters; a quotation (“...”) cut short is closed again, so what it
    quotes never runs on into the summary's own words."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1].rstrip()
    if cut.count("“") > cut.count("”"):
        return line[: limit - 2].rstrip() + "…”"
    return cut + "…"
