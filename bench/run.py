"""`make bench`: build each disk, copy it with every method, measure, compare, draw.

Usage: python -m bench [--size 2G] [--fs ext4,xfs,ntfs] [--disks empty,mixed,lvm,...]
                       [--repeat N] [--jobs N] [--source-mbps N] [--source-iops N] [--out DIR]
Exit status: 0 all targets met, 2 some target missed, 1 the bench itself failed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench import figure, report
from bench.args import parse_args
from bench.measure import Bench
from bench.methods import PROGRAM, program_accepts_source_blocks, snapshot_program
from bench.system import BenchError, Resources
from devkit.chunks import CHUNK

TOOLS = (
    "losetup",
    "sfdisk",
    "mkfs.ext4",
    "mkfs.xfs",
    "mkfs.ntfs",
    "ntfs-3g",
    "dumpe2fs",
    "xfs_db",
    "ntfscat",
    "e2fsck",
    "xfs_repair",
    "ntfsfix",
    "fstrim",
    "dd",
    "ddpt",
    "blockdev",
    "sgdisk",
    "mkswap",
    "e2image",
    "partclone.ext4",
    "xfs_copy",
    "ntfsclone",
    "partclone.ntfs",
)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent)
    return proc.stdout.strip()


def _program_version(path: Path) -> str:
    """Last commit of the program, and whether the measured files differ from it."""
    commit = _git("log", "-1", "--format=%h %cI", "--", str(path)) or "never committed"
    changed = _git("status", "--porcelain", "--", str(path))
    return f"{commit} + uncommitted changes" if changed else commit


def _raise_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally, which detaches and unmounts


def cannot_run() -> str | None:
    """Why the bench cannot run here (not root, tools missing), or None."""
    if os.geteuid() != 0:
        return "bench: run as root (it attaches loop devices and mounts filesystems)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"bench: missing tools {missing}; run `make setup`"
    return None


def run_bench(bench: Bench, names: list[str]) -> str | None:
    """Measure every disk; always release what the bench holds. Returns why it failed, or None."""
    failure = None
    try:
        bench.program_version = _program_version(PROGRAM)
        bench.program = snapshot_program(bench.work)
        bench.has_source_blocks = program_accepts_source_blocks(bench.program)
        for name in names:
            bench.disk(name)
    except BenchError as err:
        failure = str(err)
    finally:
        leftovers = bench.res.close()
        shutil.rmtree(bench.work, ignore_errors=True)
    for problem in leftovers:
        print(f"bench: clean-up problem: {problem}", file=sys.stderr)
    return failure


def run_config(args: argparse.Namespace, bench: Bench, started: float) -> dict[str, Any]:
    """What was measured, where and how (the head of results.json and report.md)."""
    return {
        "size_bytes": args.size,
        "chunk_bytes": CHUNK,
        "filesystems": args.fs,
        "disks": args.disks,
        "jobs": args.jobs,
        "repeat": args.repeat,
        "methods": args.methods,
        "source_mbps": args.source_mbps or None,
        "source_iops": args.source_iops or None,
        "program": bench.program_version,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "bench_seconds": round(time.monotonic() - started, 1),
    }


def write_results(args: argparse.Namespace, bench: Bench, config: dict[str, Any]) -> int:
    """results.json, report.md and chunks.svg; the table and the targets on stdout. Returns the
    exit status: 0 when every target is met, else 2."""
    targets = report.evaluate(bench.records)
    report.save(args.out / "results.json", config, bench.records, targets)
    (args.out / "report.md").write_text(report.markdown_report(config, bench.records, targets))
    caption = (
        f"512 KiB chunks holding data, {args.size // CHUNK} per volume "
        "(chunk 0 top left, row by row)"
    )
    (args.out / "chunks.svg").write_text(figure.render(bench.panels, args.size // CHUNK, caption))
    print()
    print(report.text_table(report.rows(bench.records)))
    for record in bench.records:
        if record.error:
            print(f"{record.disk} {record.method} FAILED: {record.error}")
    print()
    print("\n".join(report.target_lines(targets)))
    met = sum(t.met for t in targets)
    print(
        f"\n{met} of {len(targets)} targets met; wrote {args.out}/results.json, report.md "
        f"and chunks.svg in {config['bench_seconds']} s"
    )
    return 0 if met == len(targets) else 2


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = cannot_run()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_on_signal)
    args.out.mkdir(parents=True, exist_ok=True)
    for sub in ("work", "logs"):
        (args.out / sub).mkdir(exist_ok=True)
    bench = Bench(args, Resources())
    started = time.monotonic()
    failure = run_bench(bench, [*args.fs, *args.disks])
    if failure:
        print(f"bench: {failure}", file=sys.stderr)
        return 1
    return write_results(args, bench, run_config(args, bench, started))
