"""The ways of making the compact copy that the bench compares.

- the seed method (dd to an image, fstrim each filesystem on it, ddpt oflag=sparse), verbatim and
  with 1 MiB I/O: "the trim method";
- the used-block cloners a user would pick per filesystem ("peers"): `e2image -ra` and
  `partclone.ext4` (ext4), `xfs_copy -d` (XFS), `ntfsclone` and `partclone.ntfs` (NTFS). They copy
  one filesystem, so the partition table is copied around them (GPT: `sgdisk --backup` then
  `--load-backup`; MBR: `dd` of sector 0) and they run on offset loop devices stacked on the
  source and target disks' loop devices;
- the program under test, `sparsecopy copy --method allocated`, without and with
  `--source-blocks FILE` (the disk's block list, as ListSnapshotBlocks would return it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.disk import SECTOR, Layout
from bench.system import BenchError, Resources, run

PROGRAM = Path(__file__).resolve().parent.parent / "ssm-documents" / "sparsecopy"

# A method's result: the program's JSON summary, None for the other methods.
Summary = dict[str, Any] | None


def snapshot_program(into: Path) -> Path:
    """Copy the program as it is now, so edits made during a long run do not mix versions."""
    if not (PROGRAM / "__main__.py").is_file():
        raise BenchError(f"{PROGRAM}/__main__.py does not exist; the data-plane program is missing")
    copy = into / "sparsecopy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(PROGRAM, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def program_accepts_source_blocks(program: Path) -> bool:
    """Does this copy of the program know `copy --source-blocks`?"""
    proc = subprocess.run(
        ["python3", str(program), "copy", "--help"], capture_output=True, text=True, check=False
    )
    return "--source-blocks" in proc.stdout


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
    block_list: Path | None = None  # the source's block list (JSON), for --source-blocks
    # where a method that makes an image file instead of writing to `target` puts the copy
    target_file: Path | None = None


def fsync_device(device: str) -> None:
    """Make what was written to `device` durable, as every method must before it counts as done."""
    fd = os.open(device, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seed_method(job: Job, dd_block: str, ddpt_blocks: list[str]) -> Summary:
    """Seed 000: dd to an image, loop mount each filesystem with discard and fstrim it, then
    ddpt oflag=sparse onto the target. Partitions without a filesystem are copied as they are
    (ddpt's sparse writing skips their all-zero blocks).

    `mount -o loop,offset=` is done as `losetup -o` + `mount` so that the bench knows which loop
    device to detach if anything fails; the kernel sees the same thing.
    """
    image = job.scratch / "sparse.img"
    image.unlink(missing_ok=True)
    job.log.write_text("")
    try:
        dd = ["dd", f"if={job.source}", f"of={image}", f"bs={dd_block}", "status=none"]
        run(dd, log=job.log)
        for part in job.layout.filesystems():
            loop = job.res.attach(image, offset=part.start, size=part.size)
            try:
                options = ["discard", "nouuid"] if part.kind == "xfs" else ["discard"]
                job.res.mount(loop, job.mount_dir, part.kind, options)
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
    return None


def sparsecopy(job: Job, *, with_blocks: bool) -> Summary:
    """The program under test; its JSON summary (last line of stdout) is appended to the log."""
    cmd = ["python3", str(job.program), "copy", job.source, job.target, "--method", "allocated"]
    if job.jobs is not None:
        cmd += ["--jobs", str(job.jobs)]
    if with_blocks:
        if job.block_list is None:
            raise BenchError("no block list was written for this disk")
        cmd += ["--source-blocks", str(job.block_list)]
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
        log.write(f"$ {' '.join(cmd)}\nsummary: {json.dumps(summary)}\n")
    return summary


def copy_table(job: Job, to: str) -> None:
    """Copy the partition table onto `to` (the target device or image file) the way a user of a
    one-filesystem cloner would.

    GPT: `sgdisk --backup` / `--load-backup` (protective MBR, both headers and both entry arrays,
    with their CRCs, the backup at the target's end). MBR: `dd` of sector 0, because
    `sfdisk --dump` would drop the boot code and disk signature bytes a Windows disk boots by.
    """
    if job.layout.table == "gpt":
        backup = job.scratch / "gpt-backup.bin"
        backup.unlink(missing_ok=True)
        try:
            run(["sgdisk", f"--backup={backup}", job.source], log=job.log)
            run(["sgdisk", f"--load-backup={backup}", to], log=job.log)
        finally:
            backup.unlink(missing_ok=True)
    elif job.layout.table == "dos":
        dd = ["dd", f"if={job.source}", f"of={to}", f"bs={SECTOR}", "count=1", "conv=notrunc"]
        run([*dd, "status=none"], log=job.log)
    elif job.layout.table is not None:
        raise BenchError(f"no way to copy a {job.layout.table!r} partition table")


# A peer's command line from (source partition device, target partition device, log file).
PeerCommand = Callable[[str, str, Path], list[str]]


def _run_tool(job: Job, command: list[str], tool_log: Path) -> None:
    """Run a peer, its own log file (if it wrote one) appended to the method's log."""
    tool_log.unlink(missing_ok=True)
    try:
        run(command, log=job.log)
    finally:
        if tool_log.exists():
            with job.log.open("a") as log:
                log.write(tool_log.read_text(errors="replace"))
            tool_log.unlink()


def peer_method(job: Job, command: PeerCommand) -> Summary:
    """Table first, then the cloner from an offset loop device over the source's partition (read
    only) to one over the target's. Both are stacked on the whole-disk loop devices with direct
    I/O, so the source device's counters see exactly what the cloner read."""
    part = job.layout.single_filesystem()
    if part is None:
        raise BenchError("a peer copies a disk with one filesystem partition only")
    job.log.write_text("")
    copy_table(job, job.target)
    res = job.res
    source = res.attach(
        Path(job.source), offset=part.start, size=part.size, read_only=True, direct_io=True
    )
    try:
        target = res.attach(Path(job.target), offset=part.start, size=part.size, direct_io=True)
        try:
            tool_log = job.log.with_suffix(".tool.log")
            _run_tool(job, command(source, target, tool_log), tool_log)
            fsync_device(target)
        finally:
            res.detach(target)
    finally:
        res.detach(source)
    return None


def e2image_to_file(job: Job) -> Summary:
    """`e2image -ra -O OFFSET` into a new sparse image file: e2image's most compact output. To a
    block device it writes zero blocks too and every inode table whole ("writing to blk device:
    don't skip zeroed blocks"), and to an existing file it does not skip zero blocks either.
    Either way it copies only the primary superblock and group descriptors, not the backups
    (verification reports that). The table goes into the file after, and the file is extended
    to the disk's size."""
    part = job.layout.single_filesystem()
    if part is None or job.target_file is None:
        raise BenchError("e2image to a file needs one ext4 partition and a target file")
    job.log.write_text("")
    job.target_file.unlink(missing_ok=True)
    source = job.res.attach(
        Path(job.source), offset=part.start, size=part.size, read_only=True, direct_io=True
    )
    try:
        cmd = ["e2image", "-ra", "-O", str(part.start), source, str(job.target_file)]
        run(cmd, log=job.log)
    finally:
        job.res.detach(source)
    with job.target_file.open("r+b") as f:
        f.truncate(job.layout.size)
        os.fsync(f.fileno())
    copy_table(job, str(job.target_file))
    with job.target_file.open("rb") as f:
        os.fsync(f.fileno())
    return None


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    copy: Callable[[Job], Summary]
    filesystem: str | None = None  # a peer: the filesystem it copies
    to_file: bool = False  # makes the copy in Job.target_file, not on the target device


SEED_512 = "seed-bs512"
SEED_1M = "seed-bs1M"
ALLOCATED = "allocated"
BLOCKS = "allocated-blocks"
TRIM_METHODS = (SEED_512, SEED_1M)


def _partclone(fs: str) -> PeerCommand:
    # -b: device to device; -L: its log (it would write /var/log/partclone.log)
    return lambda src, dst, log: [
        f"partclone.{fs}",
        "-b",
        "-q",
        "-s",
        src,
        "-o",
        dst,
        "-L",
        str(log),
    ]


PEERS = (
    Method("e2image", "(P) e2image -ra", lambda j: peer_method(j, _e2image), "ext4"),
    Method("e2image-file", "(P) e2image -ra, to a new file", e2image_to_file, "ext4", True),
    Method(
        "partclone.ext4",
        "(P) partclone.ext4 -b",
        lambda j: peer_method(j, _partclone("ext4")),
        "ext4",
    ),
    Method("xfs_copy", "(P) xfs_copy -d", lambda j: peer_method(j, _xfs_copy), "xfs"),
    Method("ntfsclone", "(P) ntfsclone --overwrite", lambda j: peer_method(j, _ntfsclone), "ntfs"),
    Method(
        "partclone.ntfs",
        "(P) partclone.ntfs -b",
        lambda j: peer_method(j, _partclone("ntfs")),
        "ntfs",
    ),
)
PEER_NAMES = tuple(m.name for m in PEERS)


def _e2image(src: str, dst: str, log: Path) -> list[str]:
    return ["e2image", "-ra", src, dst]


def _xfs_copy(src: str, dst: str, log: Path) -> list[str]:
    return ["xfs_copy", "-d", src, dst]  # -d: the copy keeps the source's UUID, like the others


def _ntfsclone(src: str, dst: str, log: Path) -> list[str]:
    return ["ntfsclone", "--overwrite", dst, src]


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
    *PEERS,
    Method(
        ALLOCATED,
        "(3) sparsecopy --method allocated",
        lambda job: sparsecopy(job, with_blocks=False),
    ),
    Method(
        BLOCKS,
        "(4) sparsecopy ... --source-blocks",
        lambda job: sparsecopy(job, with_blocks=True),
    ),
)
LABELS = {m.name: m.label for m in METHODS}


def methods_for(
    layout: Layout, *, seed_verbatim: bool, only: list[str] | None = None
) -> list[Method]:
    """The methods run on a disk, in order: the trim method ((1) only when `seed_verbatim`, it
    is slow), the peers of its filesystem when it is a table plus one filesystem, then the
    program without and with the block list (last: it may replay a journal on the source).
    `only`: run no method not named in it."""
    part = layout.single_filesystem()
    fs = part.kind if part is not None else None
    chosen = []
    for method in METHODS:
        if method.name == SEED_512 and not seed_verbatim:
            continue
        if method.filesystem is not None and method.filesystem != fs:
            continue
        if only is not None and method.name not in only:
            continue
        chosen.append(method)
    return chosen
