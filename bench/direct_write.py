"""`make bench-direct`: the same data written as a new snapshot through a local stand-in of the
EBS direct APIs, and copied to a block device, timed side by side.

Usage: python -m bench.direct_write [--size 5G] [--data 2G] [--latency-ms 100,20,0]
           [--max-concurrency 100] [--jobs 100,32] [--paths read,block,direct] [--repeat N]
           [--program-rev REV] [--out DIR]

The data: a sparse image of SIZE bytes holding DATA bytes of random data in runs of whole
512 KiB blocks at random places (seeded), plus a few blocks that hold a little data and a few
written with zeros (allocated: a snapshot holds them). Both paths must carry exactly its held
blocks, the written zeros included (issue #19: an absent block reads as random bytes on an
encrypted restore).

- read: the floor on this disk: the image's data blocks read once, cold, in one thread.
- direct: devkit/ebs/standin.py in its own process (bench/ebs_server.py) with a stated
  per-request latency and concurrency limit; `sparsecopy put-snapshot IMAGE --jobs J` (SEEK_DATA
  finds the data, written zero blocks are put too, CompleteSnapshot after the last put).
  Afterwards the stand-in's snapshot must hold exactly the image's held blocks (SHA-256 each).
- block (root: loop devices): `sparsecopy copy SOURCE TARGET --method allocated --source-blocks
  LIST` from a loop device over the image to one over a blank sparse file, then fsync; the
  target must then hold exactly the image's held blocks.

Every run starts on a cold page cache (root). Exit status: 0 every run verified, 2 some run
failed or did not verify, 1 the bench itself failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.args import parse_size
from bench.blocks import write_block_list
from bench.ebs_server import StandInProcess
from bench.methods import PROGRAM, fsync_device, snapshot_program
from bench.report import markdown_table, text_table
from bench.system import BenchError, IoCounters, Resources, drop_caches, flush_buffers
from devkit.chunks import CHUNK, written_chunks

MIB = 1 << 20
GIB = 1 << 30
MB = 1_000_000  # AWS's "500 MB per second" is decimal
PATHS = ("read", "block", "direct", "job")
VOLUME_ID = "vol-0beec000000000001"  # the job finds it by its NVMe serial link
BY_ID_PREFIX = "nvme-Amazon_Elastic_Block_Store_"
ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDBENCHSTANDIN",
    "AWS_SECRET_ACCESS_KEY": "bench-stand-in-secret",
    "AWS_REGION": "us-east-1",
}
PARTIAL_BLOCKS = 3  # blocks holding 4 KiB of data and zeros after it
ZERO_BLOCKS = 3  # blocks written with zeros: allocated in the image, held, put all the same


@dataclass
class Run:
    """One timed copy of the data image (the columns of the report)."""

    path: str  # "read" | "block" | "direct" (put-snapshot) | "job" (job --target snapshot)
    latency_ms: float | None = None
    max_concurrency: int | None = None
    jobs: int | None = None
    blocks: int | None = None  # blocks put (direct) / 512 KiB chunks on the target (block)
    bytes: int | None = None
    seconds: float | None = None  # median over --repeat
    seconds_runs: list[float] = field(default_factory=list)
    put_seconds: float | None = None  # first put's arrival to the last put's answer (stand-in)
    mean_puts_in_flight: float | None = None
    max_puts_in_flight: int | None = None
    rejected: int | None = None  # ConcurrentLimitExceededException answers
    retries: int | None = None
    client_cpu_seconds: float | None = None
    standin_cpu_seconds: float | None = None
    source_bytes_read: int | None = None
    target_bytes_written: int | None = None
    load_before: float | None = None  # 1-minute load average when the run started
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    error: str | None = None


def data_layout(size: int, data: int, seed: int) -> tuple[list[tuple[int, int]], list[int]]:
    """(runs of whole blocks as (first block, count), blocks written with zeros), seeded.
    The runs hold about `data` bytes; runs are 1-64 blocks (512 KiB to 32 MiB, files)."""
    rng = random.Random(seed)
    total = size // CHUNK
    want = min(data // CHUNK, total - PARTIAL_BLOCKS - ZERO_BLOCKS)
    taken: set[int] = set()
    runs: list[tuple[int, int]] = []
    while len(taken) < want:
        count = min(rng.randint(1, 64), want - len(taken))
        first = rng.randrange(0, total - count + 1)
        if taken.isdisjoint(range(first, first + count)):
            taken.update(range(first, first + count))
            runs.append((first, count))
    free = [i for i in range(total) if i not in taken]
    extra = rng.sample(free, PARTIAL_BLOCKS + ZERO_BLOCKS) if len(free) >= 6 else []
    runs += [(index, 0) for index in extra[:PARTIAL_BLOCKS]]  # count 0: 4 KiB of data
    return sorted(runs), sorted(extra[PARTIAL_BLOCKS:])


def build_image(path: Path, size: int, data: int, seed: int = 7) -> dict[int, str]:
    """Write the data image; return its held blocks (index -> SHA-256 hex), the zero blocks
    included, computed while writing, independently of the reader below."""
    runs, zero_blocks = data_layout(size, data, seed)
    expected: dict[int, str] = {}
    path.unlink(missing_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
        for first, count in runs:
            for index in range(first, first + max(count, 1)):
                block = os.urandom(CHUNK) if count else os.urandom(4096) + bytes(CHUNK - 4096)
                f.seek(index * CHUNK)
                f.write(block)
                expected[index] = hashlib.sha256(block).hexdigest()
        for index in zero_blocks:
            f.seek(index * CHUNK)
            f.write(bytes(CHUNK))
            expected[index] = hashlib.sha256(bytes(CHUNK)).hexdigest()
        f.flush()
        os.fsync(f.fileno())
    return expected


def held_blocks(path: Path) -> dict[int, str]:
    """The 512 KiB blocks an image file holds (index -> SHA-256 hex), written zeros included;
    holes are skipped."""
    found: dict[int, str] = {}
    with path.open("rb") as f:
        for index in sorted(written_chunks(path)):
            f.seek(index * CHUNK)
            block = f.read(CHUNK)
            found[index] = hashlib.sha256(block + bytes(CHUNK - len(block))).hexdigest()
    return found


def compare_blocks(expected: dict[int, str], got: dict[int, str]) -> list[str]:
    """What differs between two block maps, in words (empty: the same)."""
    problems = []
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    differ = sorted(i for i in set(expected) & set(got) if expected[i] != got[i])
    for what, indexes in (("missing", missing), ("extra", extra), ("different", differ)):
        if indexes:
            problems.append(f"{len(indexes)} {what} block(s), e.g. {indexes[:5]}")
    return problems


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cold_cache() -> None:
    if os.geteuid() == 0:
        drop_caches()


def last_json_line(stdout: str, what: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as err:
        raise BenchError(f"{what}'s last stdout line is not a JSON summary: {err}") from err
    if not isinstance(summary, dict):
        raise BenchError(f"{what}'s summary is not a JSON object")
    return summary


def timed(
    cmd: list[str], env: dict[str, str], log: Path, note: str = ""
) -> tuple[str, float, float]:
    """Run a program on a cold cache: (stdout, wall seconds, its CPU seconds); stderr to `log`."""
    cold_cache()
    cpu, started = children_cpu(), time.monotonic()
    with log.open("a") as stderr:
        stderr.write(f"$ {' '.join(cmd)}{note}\n")
        stderr.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    seconds, cpu = time.monotonic() - started, children_cpu() - cpu
    if proc.returncode != 0:
        raise BenchError(f"sparsecopy {cmd[2]} exited {proc.returncode}; see {log}")
    with log.open("a") as f:
        f.write(f"summary: {json.dumps(last_json_line(proc.stdout, cmd[2]))}\n")
    return proc.stdout, seconds, cpu


def from_stand_in(run: Run, stats: dict[str, Any], snapshot_id: str) -> dict[int, str]:
    """Fill `run` from the stand-in's counters; the snapshot's blocks (index -> SHA-256 hex)."""
    snapshot = stats["snapshots"].get(snapshot_id, {})
    run.standin_cpu_seconds = stats["cpu_seconds"]
    run.put_seconds = stats["put_seconds"]
    run.mean_puts_in_flight = stats["mean_puts_in_flight"]
    run.max_puts_in_flight, run.rejected = stats["max_in_flight"], stats["rejected"]
    blocks = {int(index): digest for index, digest in snapshot.get("blocks", {}).items()}
    run.blocks, run.bytes = len(blocks), len(blocks) * CHUNK
    if snapshot.get("status") != "completed":
        run.problems.append(f"snapshot is {snapshot.get('status')!r}, not completed")
    return blocks


def put_once(program: Path, image: Path, size_gib: int, run: Run, log: Path) -> dict[int, str]:
    """One put-snapshot into a fresh stand-in process; fills `run` (seconds appended) and
    returns the blocks the stand-in's snapshot holds (index -> SHA-256 hex)."""
    assert run.latency_ms is not None and run.max_concurrency is not None and run.jobs
    with StandInProcess(run.latency_ms / 1000, run.max_concurrency) as ebs:
        env = {**os.environ, **ENV, "AWS_ENDPOINT_URL_EBS": ebs.url}
        cmd = ["python3", str(program), "put-snapshot", str(image), "--size-gib", str(size_gib)]
        cmd += ["--jobs", str(run.jobs)]
        stdout, seconds, cpu = timed(cmd, env, log, f"  (stand-in {ebs.url}, pid {ebs.pid})")
        stats = ebs.stats()
    summary = last_json_line(stdout, "put-snapshot")
    run.seconds_runs.append(round(seconds, 2))
    run.client_cpu_seconds, run.retries = round(cpu, 2), summary.get("retries")
    return from_stand_in(run, stats, str(summary.get("snapshotId")))


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def served_block_list(image: Path, work: Path) -> Iterator[str]:
    """The job's --source-blocks-url: the image's block list as volume-0.json in a gzip tar,
    served over local HTTP (in the workflow: a presigned S3 GET)."""
    served = work / "served"
    served.mkdir(exist_ok=True)
    write_block_list(image, served / "volume-0.json")
    with tarfile.open(served / "blocks.tar.gz", "w:gz") as tar:
        tar.add(served / "volume-0.json", arcname="volume-0.json")
    handler = functools.partial(QuietHandler, directory=str(served))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/blocks.tar.gz"
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(served, ignore_errors=True)


def job_command(program: Path, snapshot_id: str, jobs: int, url: str) -> list[str]:
    """The Command document's `sparsecopy job` in snapshot mode, for one volume."""
    return [
        "python3",
        str(program),
        "job",
        *("--source-volume-ids", VOLUME_ID, "--source-device-names", "/dev/sdf"),
        *("--target-volume-ids", "", "--target-device-names", ""),
        *("--target", "snapshot", "--target-snapshot-ids", snapshot_id),
        *("--jobs", str(jobs), "--verify", "false", "--source-blocks-url", url),
    ]


def job_once(program: Path, image: Path, work: Path, run: Run, log: Path) -> dict[int, str]:
    """`sparsecopy job --target snapshot` over a loop device of the image (found by its NVMe
    serial link, as on Nitro) into a snapshot started in a fresh stand-in process."""
    assert run.latency_ms is not None and run.max_concurrency is not None and run.jobs
    by_id = work / "by-id"
    shutil.rmtree(by_id, ignore_errors=True)
    by_id.mkdir()
    res = Resources()
    try:
        device = res.attach(image)
        (by_id / (BY_ID_PREFIX + VOLUME_ID.replace("-", ""))).symlink_to(device)
        with (
            StandInProcess(run.latency_ms / 1000, run.max_concurrency) as ebs,
            served_block_list(image, work) as url,
        ):
            snapshot_id = ebs.start_snapshot(-(-image.stat().st_size // GIB))
            env = {**os.environ, **ENV, "AWS_ENDPOINT_URL_EBS": ebs.url}
            env["SPARSECOPY_BY_ID_DIR"] = str(by_id)
            cmd = job_command(program, snapshot_id, run.jobs, url)
            _, seconds, cpu = timed(cmd, env, log, f"  (stand-in {ebs.url}, pid {ebs.pid})")
            stats = ebs.stats()
    finally:
        problems = res.close()
        shutil.rmtree(by_id, ignore_errors=True)
    if problems:
        raise BenchError(f"clean-up: {problems}")
    run.seconds_runs.append(round(seconds, 2))
    run.client_cpu_seconds = round(cpu, 2)
    return from_stand_in(run, stats, snapshot_id)


def read_once(image: Path, run: Run) -> dict[int, str]:
    """The floor: read the image's data blocks once, cold, in one thread, keeping nothing (what
    every copy must at least do on this disk). Returns the image's held blocks (hashed after
    the timed read)."""
    cold_cache()
    count = 0
    cpu, started = time.process_time(), time.monotonic()
    with image.open("rb", buffering=0) as f:
        for index in sorted(written_chunks(image)):
            count += len(os.pread(f.fileno(), CHUNK, index * CHUNK)) > 0
    run.seconds_runs.append(round(time.monotonic() - started, 2))
    run.client_cpu_seconds = round(time.process_time() - cpu, 2)
    run.blocks, run.bytes = count, count * CHUNK
    found = held_blocks(image)
    if count != len(found):
        run.problems.append(f"read {count} held blocks, the image has {len(found)}")
    return found


def copy_once(program: Path, image: Path, work: Path, res: Resources, run: Run, log: Path) -> Path:
    """One `sparsecopy copy --method allocated --source-blocks` from a loop device over the
    image to one over a blank sparse file, then fsync; fills `run`; returns the target file."""
    block_list, target_image = work / "blocks.json", work / "target.img"
    write_block_list(image, block_list)
    target_image.unlink(missing_ok=True)
    with target_image.open("wb") as f:
        f.truncate(image.stat().st_size)
    source = res.attach(image, read_only=True)
    try:
        target = res.attach(target_image)
        try:
            cmd = ["python3", str(program), "copy", source, target, "--method", "allocated"]
            cmd += ["--source-blocks", str(block_list)]
            cold_cache()
            flush_buffers(source)
            flush_buffers(target)
            before_source, before_target = IoCounters.of(source), IoCounters.of(target)
            cpu, started = children_cpu(), time.monotonic()
            with log.open("a") as stderr:
                stderr.write(f"$ {' '.join(cmd)}\n")
                stderr.flush()
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True)
            if proc.returncode != 0:
                raise BenchError(f"sparsecopy copy exited {proc.returncode}; see {log}")
            fsync_device(target)
            run.seconds_runs.append(round(time.monotonic() - started, 2))
            run.client_cpu_seconds = round(children_cpu() - cpu, 2)
            run.source_bytes_read = IoCounters.of(source).bytes_since(before_source)[0]
            run.target_bytes_written = IoCounters.of(target).bytes_since(before_target)[1]
            with log.open("a") as f:
                f.write(f"summary: {json.dumps(last_json_line(proc.stdout, 'copy'))}\n")
        finally:
            res.detach(target)
    finally:
        res.detach(source)
    return target_image


def measure(
    args: argparse.Namespace, program: Path, image: Path, expected: dict[int, str]
) -> list[Run]:
    """Every run the arguments ask for, each --repeat times; a failed run is recorded, not fatal."""
    runs: list[Run] = []
    size_gib = -(-args.size // GIB)
    log = args.out / "direct-write.log"
    plans: list[Run] = []
    if "read" in args.paths:
        plans.append(Run("read"))
    if "block" in args.paths:
        plans.append(Run("block"))
    for path, jobs_list in (("direct", args.jobs), ("job", args.job_jobs)):
        if path in args.paths:
            for latency in args.latency_ms:
                plans += [Run(path, latency, args.max_concurrency, jobs) for jobs in jobs_list]
    for run in plans:
        runs.append(run)
        run.load_before = round(os.getloadavg()[0], 2)
        try:
            for _ in range(args.repeat):
                got = one_run(args, program, image, size_gib, run, log)
            run.problems += compare_blocks(expected, got)
            run.verified = not run.problems
            run.seconds = round(statistics.median(run.seconds_runs), 2)
        except (BenchError, OSError, RuntimeError) as err:
            run.error = str(err)
        print("   " + "  ".join(row(run)), flush=True)
    return runs


def one_run(
    args: argparse.Namespace, program: Path, image: Path, size_gib: int, run: Run, log: Path
) -> dict[int, str]:
    """One copy by `run.path`; the blocks the result holds (index -> SHA-256 hex)."""
    if run.path == "direct":
        return put_once(program, image, size_gib, run, log)
    if run.path == "read":
        return read_once(image, run)
    if run.path == "job":
        return job_once(program, image, args.out / "work", run, log)
    res = Resources()
    try:
        target = copy_once(program, image, args.out / "work", res, run, log)
    finally:
        problems = res.close()
    if problems:
        raise BenchError(f"clean-up: {problems}")
    try:
        chunks = written_chunks(target)
        run.blocks, run.bytes = len(chunks), len(chunks) * CHUNK
        return held_blocks(target)
    finally:
        target.unlink()


HEADER = [
    "path",
    "latency ms",
    "limit",
    "jobs",
    "blocks",
    "MiB",
    "seconds",
    "MB/s",
    "puts in flight mean / max",
    "rejected",
    "retries",
    "CPU s client / stand-in",
    "load",
    "verified",
]


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


PATH_LABELS = {
    "read": "read only (no copy)",
    "block": "copy to block device (loop)",
    "direct": "put-snapshot (stand-in)",
    "job": "job --target snapshot (stand-in)",
}


def row(run: Run) -> list[str]:
    """One line of the table (MB = 10^6 bytes, as AWS's "500 MB per second")."""
    rate = run.bytes / run.seconds / MB if run.bytes is not None and run.seconds else None
    path = PATH_LABELS[run.path]
    in_flight = (
        f"{_fmt(run.mean_puts_in_flight, 1)} / {run.max_puts_in_flight}"
        if run.max_puts_in_flight is not None
        else "-"
    )
    cpu = f"{_fmt(run.client_cpu_seconds, 1)} / {_fmt(run.standin_cpu_seconds, 1)}"
    verified = "yes" if run.verified else f"NO: {run.error or '; '.join(run.problems)}"
    return [
        path,
        _fmt(run.latency_ms),
        _fmt(run.max_concurrency),
        _fmt(run.jobs),
        _fmt(run.blocks),
        _fmt(run.bytes / MIB if run.bytes is not None else None, 1),
        _fmt(run.seconds, 2),
        _fmt(rate, 1),
        in_flight,
        _fmt(run.rejected),
        _fmt(run.retries),
        cpu,
        _fmt(run.load_before, 1),
        verified,
    ]


def program_at(rev: str | None, work: Path) -> tuple[Path, str]:
    """The sparsecopy to run and what it is: the working tree's (copied, as `make bench` does)
    or ssm-documents/sparsecopy as committed at `rev` (git archive)."""
    root = PROGRAM.parent.parent
    if rev is None:
        log = ["git", "log", "-1", "--format=%h %cI", "--", str(PROGRAM)]
        commit = subprocess.run(log, capture_output=True, text=True, cwd=root).stdout.strip()
        dirty = ["git", "status", "--porcelain", "--", str(PROGRAM)]
        changed = subprocess.run(dirty, capture_output=True, text=True, cwd=root).stdout.strip()
        return snapshot_program(work), f"{commit} + uncommitted changes" if changed else commit
    archive = work / "program.tar"
    cmd = ["git", "archive", "--format=tar", "-o", str(archive), rev, "ssm-documents/sparsecopy"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    if proc.returncode != 0:
        raise BenchError(f"git archive {rev}: {proc.stderr.strip()}")
    shutil.rmtree(work / "ssm-documents", ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    archive.unlink()
    show = ["git", "log", "-1", "--format=%h %cI", rev, "--", "ssm-documents/sparsecopy"]
    commit = subprocess.run(show, capture_output=True, text=True, cwd=root).stdout.strip()
    return work / "ssm-documents" / "sparsecopy", f"{commit} (committed, at {rev})"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def config(
    args: argparse.Namespace, version: str, expected: dict[int, str], seconds: float
) -> dict[str, Any]:
    python3 = subprocess.run(["python3", "--version"], capture_output=True, text=True).stdout
    return {
        "volume_bytes": args.size,
        "data_blocks": len(expected),
        "data_bytes": len(expected) * CHUNK,
        "seed": args.seed,
        "latency_ms": args.latency_ms,
        "max_concurrency": args.max_concurrency,
        "jobs": args.jobs,
        "repeat": args.repeat,
        "program": version,
        "python3": python3.strip(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "bench_seconds": round(seconds, 1),
    }


def caption(cfg: dict[str, Any]) -> str:
    return (
        f"{cfg['date']}: a {cfg['volume_bytes'] / GIB:,.1f} GiB volume image holding "
        f"{cfg['data_bytes'] / MIB:,.0f} MiB in {cfg['data_blocks']:,} held 512 KiB blocks; "
        f"{cfg['cpus']} CPUs ({cfg['cpu']}), kernel {cfg['kernel']}, {cfg['python3']}, "
        f"sparsecopy {cfg['program']}, seconds = median of {cfg['repeat']} run(s). The snapshot "
        "path writes into a local STAND-IN of the EBS direct APIs (devkit/ebs/standin.py in its "
        "own process on the same machine, every request held for the stated latency, more "
        "requests in flight than the limit answered ConcurrentLimitExceededException), not EBS; "
        "the block device path writes to a loop device over a sparse file on the local disk."
    )


def save(out: Path, cfg: dict[str, Any], runs: list[Run]) -> None:
    doc = {"config": cfg, "runs": [asdict(run) for run in runs]}
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    table = [HEADER, *(row(run) for run in runs)]
    (out / "report.md").write_text(f"{caption(cfg)}\n\n{markdown_table(table)}\n")
    print(f"\n{caption(cfg)}\n\n{text_table(table)}")


def size(text: str) -> int:
    return parse_size(text, MIB)


def floats(text: str) -> list[float]:
    return [float(value) for value in text.split(",") if value.strip()]


def ints(text: str) -> list[int]:
    return [int(value) for value in text.split(",") if value.strip()]


def names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.direct_write", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--size", type=size, default=parse_size("5G"), help="volume (default 5G)")
    parser.add_argument("--data", type=size, default=parse_size("2G"), help="live data (2G)")
    parser.add_argument("--latency-ms", type=floats, default=[100.0, 20.0, 0.0])
    parser.add_argument("--max-concurrency", type=int, default=100, help="stand-in's limit")
    parser.add_argument("--jobs", type=ints, default=[100, 32], help="put-snapshot --jobs")
    parser.add_argument(
        "--job-jobs", type=ints, default=[16], help="job --jobs (1-64; the workflow: 16)"
    )
    parser.add_argument("--paths", type=names, default=list(PATHS))
    parser.add_argument("--repeat", type=int, choices=range(1, 10), default=1, metavar="N")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--program-rev", help="run sparsecopy as committed at this git revision")
    parser.add_argument("--out", type=Path, default=Path("out/bench-direct"))
    args = parser.parse_args(argv)
    unknown = set(args.paths) - set(PATHS)
    if unknown or args.data > args.size:
        parser.error(f"--paths from {','.join(PATHS)}; --data at most --size")
    if "block" in args.paths and os.geteuid() != 0:
        parser.error("the block path attaches loop devices: run as root, or --paths direct")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    try:
        program, version = program_at(args.program_rev, work)
        image = work / "data.img"
        print(f"== building the data image ({args.size / GIB:,.1f} GiB)", flush=True)
        expected = build_image(image, args.size, args.data, args.seed)
        if held_blocks(image) != expected:
            raise BenchError("the image reader disagrees with the image writer")
        runs = measure(args, program, image, expected)
    except BenchError as err:
        print(f"bench-direct: {err}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save(args.out, config(args, version, expected, time.monotonic() - started), runs)
    return 0 if all(run.verified for run in runs) else 2


if __name__ == "__main__":
    sys.exit(main())
