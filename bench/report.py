"""Results: one record per filesystem and method, the issue's targets, text and Markdown tables.

`python -m bench.report out/bench/results.json` prints the Markdown table for docs/benchmark.md.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.methods import ALLOCATED, METHODS, SEED_1M, SEED_512

MIB = 1024 * 1024
LABELS = {m.name: m.label for m in METHODS}


@dataclass
class Record:
    filesystem: str
    method: str
    volume_bytes: int
    allocated_bytes: int
    lower_bound_chunks: int
    seconds: float | None = None
    source_bytes_read: int | None = None
    target_bytes_written: int | None = None
    target_chunks: int | None = None
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    # 1-minute load average when the method started: other work on the machine skews seconds
    load_before: float | None = None


@dataclass(frozen=True)
class Target:
    filesystem: str
    goal: str
    measured: float | None
    limit: float | None
    met: bool
    note: str = ""
    unit: str = ""  # how to show measured and limit: "bytes", "chunks", "seconds", "problems"


def _find(records: list[Record], method: str) -> Record | None:
    return next((r for r in records if r.method == method and r.error is None), None)


def _why(records: list[Record], *methods: str) -> str:
    """Why a target that needs these methods' records could not be measured."""
    reasons = []
    for method in methods:
        record = next((r for r in records if r.method == method), None)
        if record is None:
            reasons.append(f"{method} did not run")
        elif record.error:
            reasons.append(f"{method} failed")
    return ", ".join(reasons) or "no data"


def _check(
    fs: str, goal: str, unit: str, measured: float | None, limit: float | None, why: str
) -> Target:
    if measured is None or limit is None:
        return Target(fs, goal, measured, limit, False, f"not measured: {why}", unit)
    return Target(fs, goal, measured, limit, measured <= limit, "", unit)


def evaluate(records: list[Record]) -> list[Target]:
    """The issue's targets for each filesystem; a target that could not be measured is not met."""
    targets: list[Target] = []
    for fs in dict.fromkeys(r.filesystem for r in records):
        mine = [r for r in records if r.filesystem == fs]
        base = mine[0]
        alloc = _find(mine, ALLOCATED) or Record(fs, ALLOCATED, 0, 0, 0, error="missing")
        seed512, seed1m = _find(mine, SEED_512), _find(mine, SEED_1M)
        seeds = [r.target_chunks for r in (seed512, seed1m) if r and r.target_chunks is not None]
        alone = _why(mine, ALLOCATED)
        faithful_goal = "copy is faithful (files, fsck, partition table)"
        if alloc.error:
            faithful = Target(
                fs, faithful_goal, None, 0, False, f"not measured: {alone}", "problems"
            )
        else:
            faithful = Target(
                fs,
                faithful_goal,
                len(alloc.problems),
                0,
                alloc.verified,
                "; ".join(alloc.problems),
                "problems",
            )
        targets += [
            faithful,
            _check(
                fs,
                "source bytes read <= 1.1 x allocated bytes",
                "bytes",
                alloc.source_bytes_read if not alloc.error else None,
                1.1 * base.allocated_bytes,
                alone,
            ),
            _check(
                fs,
                "target chunks <= trim method's (best of (1), (2))",
                "chunks",
                alloc.target_chunks,
                min(seeds) if seeds else None,
                _why(mine, ALLOCATED, SEED_512, SEED_1M),
            ),
            _check(
                fs,
                "target chunks <= 1.02 x lower bound",
                "chunks",
                alloc.target_chunks,
                1.02 * base.lower_bound_chunks,
                alone,
            ),
            _check(
                fs,
                "wall time <= 1/3 of (1)",
                "seconds",
                alloc.seconds,
                seed512.seconds / 3 if seed512 and seed512.seconds else None,
                _why(mine, ALLOCATED, SEED_512),
            ),
            _check(
                fs,
                "wall time <= 2/3 of (2)",
                "seconds",
                alloc.seconds,
                seed1m.seconds * 2 / 3 if seed1m and seed1m.seconds else None,
                _why(mine, ALLOCATED, SEED_1M),
            ),
        ]
    return targets


def _num(value: float | None, unit: float = 1, digits: int = 0) -> str:
    return "-" if value is None else f"{value / unit:,.{digits}f}"


def _faithful(r: Record) -> str:
    if r.error:
        return "FAILED (see above)"
    return "yes" if r.verified else "NO: " + "; ".join(r.problems)


def rows(records: list[Record]) -> list[list[str]]:
    header = [
        "filesystem",
        "method",
        "seconds",
        "source read MiB",
        "target written MiB",
        "target chunks",
        "lower bound",
        "allocated MiB",
        "faithful",
        "load",
    ]
    body = [header]
    for r in records:
        body.append(
            [
                r.filesystem,
                LABELS.get(r.method, r.method),
                _num(r.seconds, digits=1),
                _num(r.source_bytes_read, MIB, 1),
                _num(r.target_bytes_written, MIB, 1),
                _num(r.target_chunks),
                _num(r.lower_bound_chunks),
                _num(r.allocated_bytes, MIB, 1),
                _faithful(r),
                _num(r.load_before, digits=1),
            ]
        )
    return body


def text_table(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(row) + " |" for row in table]
    lines.insert(1, "|" + "---|" * len(table[0]))
    return "\n".join(lines)


def _show(value: float | None, unit: str) -> str:
    if unit == "bytes":
        return f"{_num(value, MIB, 1)} MiB"
    if unit == "seconds":
        return f"{_num(value, digits=2)} s"
    return f"{_num(value)} {unit}".rstrip()


def target_lines(targets: list[Target]) -> list[str]:
    lines = []
    for t in targets:
        status = "met   " if t.met else "MISSED"
        detail = t.note or f"{_show(t.measured, t.unit)} vs limit {_show(t.limit, t.unit)}"
        lines.append(f"{status} {t.filesystem:5} {t.goal}: {detail}")
    return lines


def save(path: Path, config: dict[str, Any], records: list[Record], targets: list[Target]) -> None:
    document = {
        "config": config,
        "records": [asdict(r) for r in records],
        "targets": [asdict(t) for t in targets],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


def load(path: Path) -> tuple[dict[str, Any], list[Record], list[Target]]:
    document = json.loads(path.read_text())
    records = [Record(**r) for r in document["records"]]
    return document["config"], records, [Target(**t) for t in document["targets"]]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.report out/bench/results.json", file=sys.stderr)
        return 2
    config, records, targets = load(Path(argv[0]))
    cap = (
        f"source capped at {config.get('source_mbps') or '-'} MiB/s and "
        f"{config.get('source_iops') or '-'} read IOPS"
        if config.get("source_mbps") or config.get("source_iops")
        else "source not throttled"
    )
    print(
        f"{config['date']}: {config['size_bytes'] / MIB:,.0f} MiB per filesystem, {cap}, "
        f"{config['cpus']} CPUs, kernel {config['kernel']}, sparsecopy at {config['program']}, "
        f"whole bench {config['bench_seconds']} s. Load = 1-minute load average when the "
        "method started.\n"
    )
    print(markdown_table(rows(records)))
    print()
    for line in target_lines(targets):
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
