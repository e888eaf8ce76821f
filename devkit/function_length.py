"""`python -m devkit.function_length`: fails when a Python function in the project's code is longer
than 60 lines (decorators and docstring included), so no function does everything. TypeScript has
eslint's max-lines-per-function with the same limit (eslint.config.js)."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 60
# Product code and the tooling around it; tests are exempt (a table of cases may be long).
ROOTS = ("lambdas/compactor", "ssm-documents/sparsecopy", "twin", "bench", "devkit")


def long_functions(path: Path, limit: int = MAX_LINES) -> Iterator[tuple[int, int, str]]:
    """(first line, length, name) of each function in `path` longer than `limit` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                yield first, length, node.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.function_length")
    parser.add_argument("roots", nargs="*", default=list(ROOTS))
    parser.add_argument("--max-lines", type=int, default=MAX_LINES)
    args = parser.parse_args(argv)
    found = [
        f"{path}:{first}: {name} has {length} lines (at most {args.max_lines}): split it"
        for root in args.roots
        for path in sorted(Path(root).rglob("*.py"))
        for first, length, name in long_functions(path, args.max_lines)
    ]
    print("\n".join(found) or f"no function over {args.max_lines} lines in {' '.join(args.roots)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
