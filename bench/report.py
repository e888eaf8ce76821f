"""Results: one record per disk and method, the issue's targets, text and Markdown tables.

`python -m bench.report out/bench/results.json` prints the Markdown report (out/bench/report.md).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.blocks import read_limit
from bench.disk import FILESYSTEMS
from bench.methods import (
    ALLOCATED,
    BLOCKS,
    LABELS,
    PEER_NAMES,
    SEED_1M,
    SEED_512,
    TRIM_METHODS,
)
from devkit import markdown

MIB = 1024 * 1024
NEVER_WRITTEN = "empty"  # the disk whose block list is empty
NEVER_WRITTEN_READ_LIMIT = MIB
EXACT = "held target chunks + needed ones left absent"


@dataclass
class Record:
    disk: str  # "ext4", "xfs", "ntfs" (seed 000's dirty disk) or bench.disk.EXTRA_DISKS
    method: str
    volume_bytes: int
    needed_bytes: int  # what a copy must carry (bench.allocation), whether held or not
    lower_bound_chunks: int  # held chunks with a needed byte: what an exact copy stores
    held_bytes: int = 0  # the block list's total: 512 KiB x blocks the snapshot holds
    held_needed_bytes: int = 0  # bytes both held and needed
    seconds: float | None = None  # the median of seconds_runs
    seconds_runs: list[float] = field(default_factory=list)  # each run's (--repeat)
    source_bytes_read: int | None = None
    target_bytes_written: int | None = None
    target_chunks: int | None = None
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    # 1-minute load average when the method started: other work on the machine skews seconds
    load_before: float | None = None
    # from sparsecopy's summary with --source-blocks (None otherwise)
    held_blocks: int | None = None
    held_blocks_read: int | None = None
    # the lower bound before issue #19: held and needed chunks with a non-zero needed byte
    nonzero_bound_chunks: int | None = None
    target_zero_chunks: int | None = None  # chunks the copy stores that are all zeros
    # lower-bound chunks the copy does not store: random bytes on an encrypted restore
    needed_absent_chunks: int | None = None
    outside_held_chunks: int | None = None  # chunks the copy stores that the source does not
    # problems on the copy restored encrypted (absent blocks random); None: not checked
    encrypted_problems: list[str] | None = None


@dataclass(frozen=True)
class Target:
    disk: str
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
    disk: str,
    goal: str,
    unit: str,
    measured: float | None,
    limit: float | None,
    why: str,
    *,
    strict: bool = False,
    note: str = "",
) -> Target:
    if measured is None or limit is None:
        return Target(disk, goal, measured, limit, False, f"not measured: {why}", unit)
    met = measured < limit if strict else measured <= limit
    return Target(disk, goal, measured, limit, met, note, unit)


def _faithful_target(disk: str, records: list[Record], method: str) -> Target:
    goal = f"{method}: copy is faithful (table, raw bytes, fsck, files)"
    record = next((r for r in records if r.method == method), None)
    if record is None or record.error:
        return Target(disk, goal, None, 0, False, f"not measured: {_why(records, method)}", "")
    note = "; ".join(record.problems)
    return Target(disk, goal, len(record.problems), 0, record.verified, note, "problems")


def _best(records: list[Record], methods: tuple[str, ...], attr: str) -> float | None:
    values = [getattr(r, attr) for r in records if r.method in methods and r.error is None]
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _seed_targets(disk: str, mine: list[Record], alloc: Record | None) -> list[Target]:
    """Issue #3's targets on seed 000's dirty disk: the program against the seed method."""
    base = mine[0]
    seed512, seed1m = _find(mine, SEED_512), _find(mine, SEED_1M)
    alone = _why(mine, ALLOCATED)
    return [
        _check(
            disk,
            f"{ALLOCATED}: source bytes read <= 1.1 x needed bytes",
            "bytes",
            alloc.source_bytes_read if alloc else None,
            1.1 * base.needed_bytes,
            alone,
        ),
        _check(
            disk,
            f"{ALLOCATED}: {EXACT} <= 1.02 x lower bound",
            "chunks",
            exact_chunks(alloc) if alloc else None,
            1.02 * base.lower_bound_chunks,
            alone,
        ),
        _check(
            disk,
            f"{ALLOCATED}: wall time <= 1/3 of (1)",
            "seconds",
            alloc.seconds if alloc else None,
            seed512.seconds / 3 if seed512 and seed512.seconds else None,
            _why(mine, ALLOCATED, SEED_512),
        ),
        _check(
            disk,
            f"{ALLOCATED}: wall time <= 2/3 of (2)",
            "seconds",
            alloc.seconds if alloc else None,
            seed1m.seconds * 2 / 3 if seed1m and seed1m.seconds else None,
            _why(mine, ALLOCATED, SEED_1M),
        ),
    ]


def exact_chunks(record: Record) -> int | None:
    """The held chunks the method's copy would store were it exact (issue #19): its chunks the
    source holds plus the held and needed ones it left absent. Comparing these keeps a method
    that drops needed zero blocks from looking smaller than one that keeps them. The chunks it
    stores that the source does not hold (zeros: without the block list the program cannot tell
    them from held ones, and the peers write zero blocks) are shown apart ("not held")."""
    counts = (record.target_chunks, record.outside_held_chunks, record.needed_absent_chunks)
    if any(count is None for count in counts):
        return None
    stored, outside, absent = (count or 0 for count in counts)
    return stored - outside + absent


def _best_exact(records: list[Record]) -> int | None:
    values = [exact_chunks(r) for r in records if r.error is None]
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _exact_targets(disk: str, mine: list[Record], method: str) -> list[Target]:
    """Issue #19: the copy stores every held and needed block (zeros included) and, restored
    encrypted (absent blocks read as random bytes), passes the same checks; with the block
    list it stores nothing the source does not hold."""
    record = _find(mine, method)
    why = _why(mine, method)
    targets = [
        _check(
            disk,
            f"{method}: exact on an encrypted launch: held and needed chunks left absent = 0",
            "chunks",
            record.needed_absent_chunks if record else None,
            0,
            why,
        ),
        _check(
            disk,
            f"{method}: faithful on an encrypted restore (absent blocks read random)",
            "problems",
            len(record.encrypted_problems)
            if record and record.encrypted_problems is not None
            else None,
            0,
            why,
            note="; ".join(record.encrypted_problems or []) if record else "",
        ),
    ]
    if method == BLOCKS:
        targets.append(
            _check(
                disk,
                f"{BLOCKS}: stores no chunk the source does not hold",
                "chunks",
                record.outside_held_chunks if record else None,
                0,
                why,
            )
        )
    return targets


def _unfaithful_note(peers: list[Record], attr: str, unit: str) -> str:
    """The peers left out of "best peer" because their copy failed verification."""
    left_out = [r for r in peers if r.error is None and not r.verified]
    if not left_out:
        return ""
    shown = ", ".join(f"{r.method} {_show(getattr(r, attr), unit)}" for r in left_out)
    return f"not counted, copy not faithful: {shown}"


def _peer_targets(disk: str, mine: list[Record], alloc: Record | None) -> list[Target]:
    """Issue #8: faster than each peer; reads no more and writes no more chunks than the best
    peer whose copy is faithful (a peer that leaves out what the filesystem needs, e.g. ext4's
    backup superblocks or NTFS's backup boot sector, does not set the bar; the note names it)."""
    peers = [r for r in mine if r.method in PEER_NAMES]
    if not peers:
        return []
    names = tuple(r.method for r in peers)
    faithful = [r for r in peers if r.verified]
    faithful_names = tuple(r.method for r in faithful)
    why = _why(mine, ALLOCATED, *names) if faithful else "no peer made a faithful copy"
    targets = [
        _check(
            disk,
            f"{ALLOCATED}: wall time < {peer.method}'s",
            "seconds",
            alloc.seconds if alloc else None,
            peer.seconds if peer.error is None else None,
            _why(mine, ALLOCATED, peer.method),
            strict=True,
        )
        for peer in peers
    ]
    targets += [
        _check(
            disk,
            f"{ALLOCATED}: source bytes read <= best faithful peer's",
            "bytes",
            alloc.source_bytes_read if alloc else None,
            _best(faithful, faithful_names, "source_bytes_read"),
            why,
            note=_unfaithful_note(peers, "source_bytes_read", "bytes"),
        ),
        _check(
            disk,
            f"{ALLOCATED}: {EXACT} <= best faithful peer's",
            "chunks",
            exact_chunks(alloc) if alloc else None,
            _best_exact(faithful),
            why,
            note=_unfaithful_note(peers, "target_chunks", "chunks"),
        ),
    ]
    return targets


def evaluate(records: list[Record]) -> list[Target]:
    """The issues' targets for each disk; a target that could not be measured is not met."""
    targets: list[Target] = []
    for disk in dict.fromkeys(r.disk for r in records):
        mine = [r for r in records if r.disk == disk]
        base = mine[0]
        alloc, blocks = _find(mine, ALLOCATED), _find(mine, BLOCKS)
        trims = tuple(m for m in TRIM_METHODS if any(r.method == m for r in mine))
        best_trim = _best_exact([r for r in mine if r.method in trims])
        targets.append(_faithful_target(disk, mine, ALLOCATED))
        targets.append(_faithful_target(disk, mine, BLOCKS))
        if disk in FILESYSTEMS:
            targets += _seed_targets(disk, mine, alloc)
        targets += _peer_targets(disk, mine, alloc)
        for method, record in ((ALLOCATED, alloc), (BLOCKS, blocks)):
            targets.append(
                _check(
                    disk,
                    f"{method}: {EXACT} <= trim method's (best of {', '.join(trims)})",
                    "chunks",
                    exact_chunks(record) if record else None,
                    best_trim,
                    _why(mine, method, *trims),
                )
            )
            targets += _exact_targets(disk, mine, method)
        targets.append(
            _check(
                disk,
                f"{BLOCKS}: source bytes read <= 1.1 x held-and-needed + 1 MiB",
                "bytes",
                blocks.source_bytes_read if blocks else None,
                read_limit(base.held_needed_bytes),
                _why(mine, BLOCKS),
            )
        )
        if disk == NEVER_WRITTEN:
            targets.append(
                _check(
                    disk,
                    f"{BLOCKS}: a never-written volume reads <= 1 MiB",
                    "bytes",
                    blocks.source_bytes_read if blocks else None,
                    NEVER_WRITTEN_READ_LIMIT,
                    _why(mine, BLOCKS),
                )
            )
    return targets


def _num(value: float | None, unit: float = 1, digits: int = 0) -> str:
    return "-" if value is None else f"{value / unit:,.{digits}f}"


def _faithful(r: Record) -> str:
    if r.error:
        return "FAILED (see above)"
    return "yes" if r.verified else "NO: " + "; ".join(r.problems)


def _encrypted(r: Record) -> str:
    if r.error or r.encrypted_problems is None:
        return "-"
    return "NO: " + "; ".join(r.encrypted_problems) if r.encrypted_problems else "yes"


def rows(records: list[Record]) -> list[list[str]]:
    header = [
        "disk",
        "method",
        "seconds",
        "source read MiB",
        "held MiB",
        "needed MiB",
        "held & needed MiB",
        "target written MiB",
        "target chunks",
        "all-zero chunks",
        "needed chunks absent",
        "not held",
        "lower bound",
        "non-zero bound",
        "faithful",
        "faithful restored encrypted",
        "load",
    ]
    body = [header]
    for r in records:
        body.append(
            [
                r.disk,
                LABELS.get(r.method, r.method),
                _num(r.seconds, digits=2),
                _num(r.source_bytes_read, MIB, 1),
                _num(r.held_bytes, MIB, 1),
                _num(r.needed_bytes, MIB, 1),
                _num(r.held_needed_bytes, MIB, 1),
                _num(r.target_bytes_written, MIB, 1),
                _num(r.target_chunks),
                _num(r.target_zero_chunks),
                _num(r.needed_absent_chunks),
                _num(r.outside_held_chunks),
                _num(r.lower_bound_chunks),
                _num(r.nonzero_bound_chunks),
                _faithful(r),
                _encrypted(r),
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
    """``table``'s first row is its header, as text_table's."""
    return markdown.table(table[0], table[1:])


def _show(value: float | None, unit: str) -> str:
    if unit == "bytes":
        return f"{_num(value, MIB, 2)} MiB"
    if unit == "seconds":
        return f"{_num(value, digits=2)} s"
    return f"{_num(value)} {unit}".rstrip()


def target_lines(targets: list[Target]) -> list[str]:
    lines = []
    for t in targets:
        status = "PASS" if t.met else "MISS"
        detail = f"{_show(t.measured, t.unit)} vs limit {_show(t.limit, t.unit)}"
        if t.note:
            detail = t.note if t.measured is None else f"{detail}: {t.note}"
        lines.append(f"{status} {t.disk:12} {t.goal}: {detail}")
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


def markdown_report(config: dict[str, Any], records: list[Record], targets: list[Target]) -> str:
    cap = (
        f"source capped at {config.get('source_mbps') or '-'} MiB/s and "
        f"{config.get('source_iops') or '-'} read IOPS"
        if config.get("source_mbps") or config.get("source_iops")
        else "source not throttled"
    )
    met = sum(t.met for t in targets)
    lines = [
        f"{config['date']}: {config['size_bytes'] / MIB:,.0f} MiB per disk, {cap}, "
        f"{config['cpus']} CPUs, kernel {config['kernel']}, sparsecopy at {config['program']}, "
        f"whole bench {config['bench_seconds']} s, seconds = median of "
        f"{config.get('repeat', 1)} run(s). Load = 1-minute load average when the "
        "method started. Held = the block list's total (512 KiB blocks holding data); needed = "
        "what the copy must carry (bench/allocation.py); source read = sectors read by the "
        "source disk's loop device; lower bound = held chunks holding a needed byte (zeros "
        "included), non-zero bound = those with a non-zero needed byte; needed chunks absent = "
        "lower-bound chunks the copy does not store (random bytes on an encrypted restore).",
        "",
        markdown_table(rows(records)),
        "",
        f"{met} of {len(targets)} targets met:",
        "",
        *(f"- {line}" for line in target_lines(targets)),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.report out/bench/results.json", file=sys.stderr)
        return 2
    print(markdown_report(*load(Path(argv[0]))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
