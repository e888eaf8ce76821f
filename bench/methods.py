"""The three ways of making the compact copy that the bench compares."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.disk import Layout
from bench.system import BenchError, Resources, run

PROGRAM = Path(__file__).resolve().parent.parent / "ssm-documents" / "sparsecopy"


def snapshot_program(into: Path) -> Path:
    """Copy the program as it is now, so edits made during a long run do not mix versions."""
    if not (PROGRAM / "__main__.py").is_file():
        raise BenchError(f"{PROGRAM}/__main__.py does not exist; the data-plane program is missing")
    copy = into / "sparsecopy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(PROGRAM, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


@dataclass(frozen=True)
class Job:
    """One copy of `source` onto the blank `target` (both whole-disk loop devices)."""

    source: str
    target: str
    layout: Layout
    scratch: Path  # directory for the seed method's image
    mount_dir: Path
    log: Path  # the method's own output goes here
    jobs: int | None
    res: Resources
    program: Path  # the copy of ssm-documents/sparsecopy taken when the bench started


def seed_method(job: Job, dd_block: str, ddpt_blocks: list[str]) -> None:
    """Seed 000: dd to an image, loop mount it with discard, fstrim, ddpt oflag=sparse onto target.

    `mount -o loop,offset=` is done as `losetup -o` + `mount` so that the bench knows which loop
    device to detach if anything fails; the kernel sees the same thing.
    """
    image = job.scratch / "sparse.img"
    image.unlink(missing_ok=True)
    job.log.write_text("")
    try:
        dd = ["dd", f"if={job.source}", f"of={image}", f"bs={dd_block}", "status=none"]
        run(dd, log=job.log)
        loop = job.res.attach(image, offset=job.layout.part_start)
        try:
            options = ["discard", "nouuid"] if job.layout.fs == "xfs" else ["discard"]
            job.res.mount(loop, job.mount_dir, job.layout.fs, options)
            try:
                run(["fstrim", "--verbose", str(job.mount_dir)], log=job.log)
            finally:
                job.res.umount(job.mount_dir)
        finally:
            job.res.detach(loop)
        ddpt = ["ddpt", f"if={image}", f"of={job.target}", *ddpt_blocks, "oflag=sparse"]
        run(ddpt, log=job.log)
    finally:
        image.unlink(missing_ok=True)


def sparsecopy_allocated(job: Job) -> None:
    """The program under test; its JSON summary (last line of stdout) is appended to the log."""
    cmd = ["python3", str(job.program), "copy", job.source, job.target, "--method", "allocated"]
    if job.jobs is not None:
        cmd += ["--jobs", str(job.jobs)]
    with job.log.open("w") as stderr:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, check=False)
    if proc.returncode != 0:
        lines = job.log.read_text().strip().splitlines()
        raise BenchError(
            f"sparsecopy exited {proc.returncode}: {lines[-1] if lines else '(no stderr)'}"
        )
    lines = proc.stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as err:
        raise BenchError(f"sparsecopy's last stdout line is not a JSON summary: {err}") from err
    if not isinstance(summary, dict):
        raise BenchError("sparsecopy's summary is not a JSON object")
    with job.log.open("a") as log:
        log.write(f"summary: {json.dumps(summary)}\n")


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    copy: Callable[[Job], None]


SEED_512 = "seed-bs512"
SEED_1M = "seed-bs1M"
ALLOCATED = "allocated"

METHODS = (
    Method(
        SEED_512,
        "(1) seed method verbatim, bs=512",
        lambda job: seed_method(job, "512", ["bs=512"]),
    ),
    # ddpt's bs is the device's logical block size (it refuses bs=1M on a 512-byte-sector
    # device); bpt (blocks per transfer) is how ddpt is told to move 1 MiB at a time.
    Method(
        SEED_1M,
        "(2) seed method, 1 MiB I/O",
        lambda job: seed_method(job, "1M", ["bs=512", "bpt=2048"]),
    ),
    Method(ALLOCATED, "(3) sparsecopy --method allocated", sparsecopy_allocated),
)
