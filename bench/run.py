"""`make bench`: build each disk, copy it with every method, measure, compare, draw.

Usage: python -m bench [--size 2G] [--fs ext4,xfs,ntfs] [--disks empty,mixed,lvm,stale-itable]
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
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench import figure, report
from bench.allocation import Allocation, allocation
from bench.blocks import held_and_needed, write_block_list
from bench.disk import EXTRA_DISKS, FILESYSTEMS, MIB, Disk, Layout, build
from bench.methods import (
    BLOCKS,
    PROGRAM,
    Job,
    Method,
    fsync_device,
    methods_for,
    program_accepts_source_blocks,
    snapshot_program,
)
from bench.report import Record
from bench.system import BenchError, IoCounters, Resources, drop_caches, flush_buffers
from bench.throttle import throttled_reads
from bench.verify import check_target
from devkit.chunks import CHUNK, nonzero_chunks, written_chunks

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
SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


MIN_SIZE = 256 * MIB  # small sizes are for developing the bench (mkfs.xfs needs 300 MiB)


def parse_size(text: str) -> int:
    """'2G' -> 2147483648 (binary units); at least 256 MiB, in whole MiB."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = SUFFIXES.get(text[-1:], 1) if text else 1
    number = text[:-1] if text[-1:] in SUFFIXES else text
    try:
        size = int(float(number) * factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a number like 2G") from None
    if size < MIN_SIZE or size % MIB:
        raise argparse.ArgumentTypeError(f"size {text!r} must be at least 256M and whole MiB")
    return size


def parse_filesystems(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FILESYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown filesystem(s) {unknown}; choose from {','.join(FILESYSTEMS)}"
        )
    return names


def parse_disks(text: str) -> list[str]:
    """The disks besides the dirty one per filesystem: a comma list, or "none"."""
    if text.strip() == "none":
        return []
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in EXTRA_DISKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown disk(s) {unknown}; choose from {','.join(EXTRA_DISKS)} or none"
        )
    return names


class Bench:
    def __init__(self, args: argparse.Namespace, res: Resources) -> None:
        self.size: int = args.size
        self.jobs: int | None = args.jobs
        self.repeat: int = args.repeat
        self.source_bps: int = args.source_mbps * MIB
        self.source_iops: int = args.source_iops
        self.out: Path = args.out
        self.work = args.out / "work"
        self.logs = args.out / "logs"
        self.mount_dir = self.work / "mnt"
        self.res = res
        self.records: list[Record] = []
        self.program = PROGRAM
        self.program_version = "not measured"
        self.has_source_blocks = False
        self.panels: list[tuple[str, list[figure.Panel]]] = []

    def disk(self, name: str) -> None:
        print(f"== {name}: building the disk ({self.size / MIB:,.0f} MiB)", flush=True)
        disk = build(name, self.work / f"source-{name}.img", self.size, self.mount_dir, self.res)
        alloc = allocation(disk.image, disk.layout, self.res)
        check_allocation(disk, alloc)
        lower = nonzero_chunks(disk.image, alloc.extents)
        block_list = self.work / f"blocks-{name}.json"
        held = write_block_list(disk.image, block_list)
        held_needed = held_and_needed(held, alloc.extents)
        print(
            f"   needed {alloc.bytes / MIB:,.1f} MiB, held {len(held) * CHUNK / MIB:,.1f} MiB "
            f"({len(held)} blocks), held and needed {held_needed / MIB:,.1f} MiB, "
            f"lower bound {len(lower)} chunks",
            flush=True,
        )
        panels: list[figure.Panel] = [
            ("source: written (snapshot stores these)", "source", held),
            ("lower bound: needed, non-zero", "bound", lower),
        ]
        source = self.res.attach(disk.image)
        try:
            for method in methods_for(disk.layout, seed_verbatim=name in FILESYSTEMS):
                record = Record(
                    name,
                    method.name,
                    self.size,
                    needed_bytes=alloc.bytes,
                    lower_bound_chunks=len(lower),
                    held_bytes=len(held) * CHUNK,
                    held_needed_bytes=held_needed,
                )
                self.records.append(record)
                if method.name == BLOCKS and not self.has_source_blocks:
                    record.error = "this sparsecopy has no copy --source-blocks option (yet)"
                    print(f"   {method.label} SKIPPED: {record.error}", flush=True)
                    continue
                target_image = self.work / f"target-{name}-{method.name}.img"
                copy = None
                for _ in range(self.repeat):
                    if copy is not None:
                        copy.unlink()  # only the last run's copy is checked
                    copy = self.copy(method, source, disk.layout, target_image, record, block_list)
                    if copy is None:
                        break
                    assert record.seconds is not None
                    record.seconds_runs.append(record.seconds)
                if copy is not None:
                    record.seconds = round(statistics.median(record.seconds_runs), 2)
                    chunks = written_chunks(copy)
                    record.target_chunks = len(chunks)
                    panels.append((f"target {method.label.split(')')[0]})", "target", chunks))
                    record.problems += check_target(disk, alloc, copy, self.mount_dir, self.res)
                    record.verified = not record.problems
                    copy.unlink()
                target_image.unlink(missing_ok=True)
                if record.error is None:
                    print(
                        f"   {method.label}: " + "  ".join(report.rows([record])[1][2:]), flush=True
                    )
        finally:
            self.res.detach(source)
        disk.image.unlink()
        block_list.unlink()
        self.panels.append((name, panels))

    def copy(
        self,
        method: Method,
        source: str,
        layout: Layout,
        target_image: Path,
        record: Record,
        block_list: Path,
    ) -> Path | None:
        """Run one method onto a fresh all-holes target; fill `record`; return the image file
        holding the copy (None when the method failed)."""
        target_image.unlink(missing_ok=True)
        with target_image.open("wb") as f:
            f.truncate(self.size)
        target = self.res.attach(target_image)
        job = Job(
            source=source,
            target=target,
            layout=layout,
            scratch=self.work,
            mount_dir=self.mount_dir,
            log=self.logs / f"{record.disk}-{method.name}.log",
            jobs=self.jobs,
            res=self.res,
            program=self.program,
            block_list=block_list,
            target_file=target_image.with_suffix(".file.img") if method.to_file else None,
        )
        try:
            drop_caches()
            flush_buffers(source)
            flush_buffers(target)
            record.load_before = round(os.getloadavg()[0], 2)
            before_source, before_target = IoCounters.of(source), IoCounters.of(target)
            start = time.monotonic()
            try:
                with throttled_reads(source, self.source_bps, self.source_iops):
                    summary = method.copy(job)
                    fsync_device(target)
                record.seconds = round(time.monotonic() - start, 2)
                if summary is not None:
                    record.held_blocks, record.held_blocks_read = held_counts(summary)
            except (BenchError, OSError) as err:
                record.error = str(err)
                print(f"   {method.label} FAILED: {err}", flush=True)
            record.source_bytes_read = IoCounters.of(source).bytes_since(before_source)[0]
            _, written, discarded = IoCounters.of(target).bytes_since(before_target)
            # a method that writes an image file instead has no device counter to read
            record.target_bytes_written = None if method.to_file else written
            if discarded:
                # A discard punches holes in the backing file, so chunks written and then
                # discarded would not be counted here although EBS would keep them.
                record.problems.append(f"discarded {discarded} bytes on the target")
            flush_buffers(target)
        finally:
            self.res.detach(target)
        if record.error is not None:
            if job.target_file is not None:
                job.target_file.unlink(missing_ok=True)
            return None
        return job.target_file or target_image


def check_allocation(disk: Disk, alloc: Allocation) -> None:
    """Two of five files are live: each filesystem's allocated total must cover them but not a
    third file; otherwise the allocation reader is wrong."""
    for number, files in disk.live_files.items():
        live = len(files) * disk.file_size
        fs_bytes = alloc.fs_bytes.get(number, 0)
        if not live <= fs_bytes <= live + disk.file_size:
            raise BenchError(
                f"{disk.name}: allocation maps say {fs_bytes} bytes allocated in partition "
                f"{number}, but the live files hold {live}; the allocation reader is wrong"
            )


def held_counts(summary: dict[str, Any]) -> tuple[int | None, int | None]:
    """(held_blocks, held_blocks_read) from sparsecopy's summary: at its top level, or summed
    over its volume entries; None when absent (the run had no block list)."""
    entries = summary.get("volumes")
    sources = entries if isinstance(entries, list) and entries else [summary]
    counts: list[int | None] = []
    for key in ("held_blocks", "held_blocks_read"):
        values = [v.get(key) for v in sources if isinstance(v, dict)]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        counts.append(sum(numbers) if numbers and len(numbers) == len(values) else None)
    return counts[0], counts[1]


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("2G"),
        help="volume size per filesystem (default 2G)",
    )
    parser.add_argument(
        "--fs",
        type=parse_filesystems,
        default=list(FILESYSTEMS),
        help="comma list of filesystems (default ext4,xfs,ntfs)",
    )
    parser.add_argument(
        "--disks",
        type=parse_disks,
        default=list(EXTRA_DISKS),
        help="comma list of the other disks, or none (default empty,mixed,lvm,stale-itable)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="--jobs for sparsecopy (default: the program's own default)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        choices=range(1, 10),
        default=1,
        metavar="N",
        help="run each method N times; seconds is the median (default 1)",
    )
    parser.add_argument(
        "--source-mbps",
        type=int,
        default=0,
        help="cap reads of the source device at N MiB/s (default: no cap)",
    )
    parser.add_argument(
        "--source-iops",
        type=int,
        default=0,
        help="cap read requests to the source device at N per second (default: no cap)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print(
            "bench: run as root (it attaches loop devices and mounts filesystems)", file=sys.stderr
        )
        return 1
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        print(f"bench: missing tools {missing}; run `make setup`", file=sys.stderr)
        return 1
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_on_signal)
    args.out.mkdir(parents=True, exist_ok=True)
    for sub in ("work", "logs"):
        (args.out / sub).mkdir(exist_ok=True)
    res = Resources()
    bench = Bench(args, res)
    started = time.monotonic()
    failure = None
    try:
        bench.program_version = _program_version(PROGRAM)
        bench.program = snapshot_program(bench.work)
        bench.has_source_blocks = program_accepts_source_blocks(bench.program)
        for name in [*args.fs, *args.disks]:
            bench.disk(name)
    except BenchError as err:
        failure = str(err)
    finally:
        leftovers = res.close()
        shutil.rmtree(bench.work, ignore_errors=True)
    for problem in leftovers:
        print(f"bench: clean-up problem: {problem}", file=sys.stderr)
    if failure:
        print(f"bench: {failure}", file=sys.stderr)
        return 1
    targets = report.evaluate(bench.records)
    config = {
        "size_bytes": args.size,
        "chunk_bytes": CHUNK,
        "filesystems": args.fs,
        "disks": args.disks,
        "jobs": args.jobs,
        "repeat": args.repeat,
        "source_mbps": args.source_mbps or None,
        "source_iops": args.source_iops or None,
        "program": bench.program_version,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "bench_seconds": round(time.monotonic() - started, 1),
    }
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
