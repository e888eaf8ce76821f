"""Measuring one disk: build it, copy it with every method onto a blank target, time each copy,
count what each device saw, check the copy, and keep the chunk maps for the figure."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import figure, report
from bench.allocation import Allocation, allocation
from bench.blocks import held_and_needed, held_needed_chunks, write_block_list
from bench.disk import FILESYSTEMS, MIB, ZERO_FILE, Disk, Layout, build
from bench.methods import (
    BLOCKS,
    PROGRAM,
    Job,
    Method,
    fsync_device,
    methods_for,
)
from bench.report import Record
from bench.system import BenchError, IoCounters, Resources, drop_caches, flush_buffers
from bench.throttle import throttled_reads
from bench.verify import check_target
from devkit.chunks import CHUNK, nonzero_chunks, written_chunks
from devkit.restore import restore_image


@dataclass(frozen=True)
class SourceBlocks:
    """The source's block list: its file (for --source-blocks), its chunks, and the lower bound
    (the held chunks holding a needed byte)."""

    path: Path
    held: set[int]
    lower: set[int]


class Bench:
    def __init__(self, args: argparse.Namespace, res: Resources) -> None:
        self.size: int = args.size
        self.jobs: int | None = args.jobs
        self.repeat: int = args.repeat
        self.methods: list[str] | None = args.methods
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
        block_list = self.work / f"blocks-{name}.json"
        held = write_block_list(disk.image, block_list)
        held_needed = held_and_needed(held, alloc.extents)
        lower = held_needed_chunks(held, alloc.extents)
        nonzero = nonzero_chunks(disk.image, alloc.extents)
        print(
            f"   needed {alloc.bytes / MIB:,.1f} MiB, held {len(held) * CHUNK / MIB:,.1f} MiB "
            f"({len(held)} blocks), held and needed {held_needed / MIB:,.1f} MiB, "
            f"lower bound {len(lower)} chunks ({len(lower - nonzero)} of them all zeros)",
            flush=True,
        )
        panels: list[figure.Panel] = [
            ("source: written (snapshot stores these)", "source", held),
            ("lower bound: held and needed", "bound", lower),
        ]
        source = self.res.attach(disk.image)
        try:
            chosen = methods_for(disk.layout, seed_verbatim=name in FILESYSTEMS, only=self.methods)
            for method in chosen:
                record = Record(
                    name,
                    method.name,
                    self.size,
                    needed_bytes=alloc.bytes,
                    lower_bound_chunks=len(lower),
                    held_bytes=len(held) * CHUNK,
                    held_needed_bytes=held_needed,
                    nonzero_bound_chunks=len(nonzero & lower),
                )
                self.records.append(record)
                blocks = SourceBlocks(block_list, held, lower)
                chunks = self.measure(method, record, disk, alloc, source, blocks)
                if chunks is not None:
                    panels.append((f"target {method.label.split(')')[0]})", "target", chunks))
        finally:
            self.res.detach(source)
        disk.image.unlink()
        block_list.unlink()
        self.panels.append((name, panels))

    def measure(
        self,
        method: Method,
        record: Record,
        disk: Disk,
        alloc: Allocation,
        source: str,
        blocks: SourceBlocks,
    ) -> set[int] | None:
        """Copy `disk` with one method `repeat` times and check the last copy, as it is and
        restored encrypted; fill `record`; return the chunks the copy holds (None when the
        method was skipped or failed)."""
        if method.name == BLOCKS and not self.has_source_blocks:
            record.error = "this sparsecopy has no copy --source-blocks option (yet)"
            print(f"   {method.label} SKIPPED: {record.error}", flush=True)
            return None
        target_image = self.work / f"target-{disk.name}-{method.name}.img"
        copy = None
        for _ in range(self.repeat):
            if copy is not None:
                copy.unlink()  # only the last run's copy is checked
            copy = self.copy(method, source, disk.layout, target_image, record, blocks.path)
            if copy is None:
                break
            assert record.seconds is not None
            record.seconds_runs.append(record.seconds)
        chunks = None
        if copy is not None:
            record.seconds = round(statistics.median(record.seconds_runs), 2)
            chunks = written_chunks(copy)
            record.target_chunks = len(chunks)
            record.target_zero_chunks = len(chunks - nonzero_chunks(copy))
            inspect_copy(record, chunks, blocks.held, blocks.lower)
            record.problems += check_target(disk, alloc, copy, self.mount_dir, self.res)
            record.verified = not record.problems
            restored = restore_image(copy, copy.with_suffix(".encrypted.img"), copy.name)
            copy.unlink()
            record.encrypted_problems = check_target(
                disk, alloc, restored, self.mount_dir, self.res, held=blocks.held
            )
            restored.unlink()
        target_image.unlink(missing_ok=True)
        if record.error is None:
            print(f"   {method.label}: " + "  ".join(report.rows([record])[1][2:]), flush=True)
        return chunks

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
            self.timed_copy(method, job, record)
        finally:
            self.res.detach(target)
        if record.error is not None:
            if job.target_file is not None:
                job.target_file.unlink(missing_ok=True)
            return None
        return job.target_file or target_image

    def timed_copy(self, method: Method, job: Job, record: Record) -> None:
        """Run the method on cold caches, the source's reads capped; fill `record` with its
        time, the bytes each device saw and its error."""
        source, target = job.source, job.target
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


def inspect_copy(record: Record, chunks: set[int], held: set[int], lower: set[int]) -> None:
    """What the copy's chunks say against the rule "held and needed, nothing else": the needed
    held chunks it left absent (random bytes on an encrypted restore) and the chunks it stored
    that the source does not hold."""
    record.needed_absent_chunks = len(lower - chunks)
    record.outside_held_chunks = len(chunks - held)


def check_allocation(disk: Disk, alloc: Allocation) -> None:
    """Two of five files are live (and the zero file where there is one): each filesystem's
    allocated total must cover them but not a third file; otherwise the allocation reader is
    wrong."""
    for number, files in disk.live_files.items():
        zero_file = disk.zero_file_size if ZERO_FILE in files else 0
        live = (len(files) - bool(zero_file)) * disk.file_size + zero_file
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
