"""`python -m devkit.links`: fails when a relative link in README.md or docs/*.md does not resolve.

Checked: the file or folder a link names exists; a `#anchor` into a Markdown file names one of its
headings (GitHub's slugs); a `#L<n>` into another file is within its length. Links in code blocks
and inline code are not links; http(s) and mailto links are not checked (the build is offline).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILES = ("README.md", "docs/*.md")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+\1")
LINE_ANCHOR = re.compile(r"^L(\d+)(?:-L(\d+))?$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, no punctuation, - for spaces."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (repeats numbered like GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _check_anchor(target: Path, anchor: str) -> str | None:
    if target.is_dir() or not anchor:
        return None
    if target.suffix == ".md":
        return None if anchor in anchors(target) else f"no heading #{anchor} in {target.name}"
    match = LINE_ANCHOR.match(anchor)
    if not match:
        return None
    length = len(target.read_text(errors="replace").splitlines())
    last = int(match[2] or match[1])
    return None if last <= length else f"{target.name} has {length} lines, not {last}"


def problems(path: Path, root: Path = ROOT) -> Iterator[str]:
    """One message per broken relative link in the Markdown file `path`."""
    for number, line in _prose_lines(path.read_text()):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            link = match[1]
            if EXTERNAL.match(link):
                continue
            name, _, anchor = link.partition("#")
            target = (path.parent / name).resolve() if name else path.resolve()
            where = f"{path.relative_to(root)}:{number}: {link}"
            if not target.exists():
                yield f"{where}: no such file"
                continue
            wrong = _check_anchor(target, anchor)
            if wrong:
                yield f"{where}: {wrong}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.links")
    parser.add_argument("patterns", nargs="*", default=list(DEFAULT_FILES))
    args = parser.parse_args(argv)
    files = sorted({p for pattern in args.patterns for p in ROOT.glob(pattern)})
    found = [message for path in files for message in problems(path)]
    print("\n".join(found) or f"every relative link resolves in {len(files)} Markdown files")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
