"""devkit.markdown: the one table renderer of the generated docs and the reports."""

from __future__ import annotations

from devkit import markdown


def test_a_table_is_header_rule_and_rows() -> None:
    assert markdown.table(["a", "b"], [["1", "2"], ["3", "4"]]) == (
        "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |"
    )


def test_a_cell_cannot_break_its_row() -> None:
    # a bar inside a code span still splits a GitHub table cell unless escaped
    assert markdown.table(["x"], [["`a|b`\nc"]]).splitlines()[2] == "| `a\\|b` c |"
