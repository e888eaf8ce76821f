"""The one Markdown table renderer: every generated doc table, the sweep and bench reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(text: str) -> str:
    """A cell's text that cannot break its row: a bar is escaped, a newline becomes a space."""
    return text.replace("|", "\\|").replace("\n", " ")


def row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """The header row, its rule and the rows, without a final newline."""
    return "\n".join([row(header), "|" + "---|" * len(header), *(row(r) for r in rows)])
