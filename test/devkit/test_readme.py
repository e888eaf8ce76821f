"""The README is the front page: a quick start, the map and pointers into docs/ (issue #24 set
its limit; details belong in docs/)."""

from __future__ import annotations

from devkit import docs

README_MAX_LINES = 200


def test_the_readme_stays_short() -> None:
    lines = (docs.ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines, more than {README_MAX_LINES}: move a section to docs/"
    )
