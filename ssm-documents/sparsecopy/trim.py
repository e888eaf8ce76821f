"""The seed method for one partition: stage it (∩ held) in a sparse scratch image, zeros
included, loop-mount it, fstrim (the kernel punches holes where the filesystem has free space),
then copy the image's remaining data, zeros included, to the target. What fstrim leaves is what
the kernel's filesystem needs: the trim method's "needed". Used for filesystems only the kernel
can read."""

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import NamedTuple, Optional

from .blockdev import detach, mounted, run
from .blocks import ZEROS, touched_blocks
from .copier import Copier
from .errors import Failure
from .extents import Extents, normalize, shift, total
from .plan import RAW, PartPlan, scratch_room
from .progress import Progress, log
from .source_blocks import BLOCK_SIZE, Held


class Trimmed(NamedTuple):
    bytes_read: int  # of the source
    bytes_written: int
    blocks: "dict[int, bool]"  # the disk's blocks written: whether the written bytes are zeros


def data_extents(fd: int, size: int) -> Extents:
    """Byte ranges of a sparse file that hold data (SEEK_DATA / SEEK_HOLE)."""
    out: Extents = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        out.append((start, end - start))
        pos = end
    return out


@contextlib.contextmanager
def scratch_image(directory: str, size: int) -> Iterator[str]:
    available = scratch_room(directory)
    if available < size:
        raise Failure(
            f"scratch directory {directory} has {available} bytes free but a partition of "
            f"{size} bytes may need them all: pass --scratch on a larger disk"
        )
    fd, path = tempfile.mkstemp(prefix="sparsecopy-", suffix=".img", dir=directory)
    try:
        os.ftruncate(fd, size)
        os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _fstrim(image: str, fs: str) -> Optional[str]:
    """Mount the image with discard and fstrim it; None on success, else why it failed."""
    device = run(["losetup", "--find", "--show", image]).stdout.strip()
    try:
        options = "discard,nouuid" if fs == "xfs" else "discard"
        with mounted(device, fs, options) as mnt:
            run(["fstrim", mnt])
    except Failure as exc:
        return str(exc)
    finally:
        detach(device, image)
    return None


def staged_extents(plan: PartPlan, held: Optional[Held] = None) -> Extents:
    """What the trim method reads of the source: the partition (∩ held)."""
    whole = [(plan.start, plan.size)]
    return held.clip(whole) if held else whole


def copy_trimmed(
    plan: PartPlan,
    source_fd: int,
    target_fd: int,
    scratch: str,
    jobs: int,
    verify: bool,
    progress: Progress,
    held: Optional[Held] = None,
) -> "Trimmed":
    """Copy one partition by the trim method: what it read of the source and wrote.

    Staging counts in ``progress`` (the copy's). With ``held`` (--source-blocks) only the listed
    blocks are staged: the rest of the image stays a hole (the zeros those blocks hold)."""
    with scratch_image(scratch, plan.size) as image:
        staging = Copier(jobs, on_read=held.touch if held else None)
        image_fd = os.open(image, os.O_RDWR)
        staged = staged_extents(plan, held)
        try:
            staging.copy(source_fd, image_fd, staged, progress, shift=-plan.start)
            os.fsync(image_fd)
        finally:
            os.close(image_fd)
        problem = _fstrim(image, plan.fs)
        if problem:
            log(f"partition {plan.number}: fstrim failed ({problem}); copying it raw")
            plan.use(RAW, [], f"fstrim failed ({problem}); copied every staged block")
        image_fd = os.open(image, os.O_RDONLY)
        try:
            kept = data_extents(image_fd, plan.size)
            out = Copier(jobs)
            out.copy(
                image_fd,
                target_fd,
                kept,
                Progress(f"partition {plan.number}: writing", total(kept)),
                shift=plan.start,
            )
            os.fsync(target_fd)
            if verify:
                out.compare(
                    image_fd,
                    target_fd,
                    kept,
                    Progress(f"partition {plan.number}: verifying", total(kept)),
                    shift=plan.start,
                )
            found = _kept_blocks(image_fd, kept, plan.start)
        finally:
            os.close(image_fd)
        plan.extents = [(plan.start + s, n) for s, n in kept]
        return Trimmed(staging.bytes_read, out.bytes_written, found)


def _kept_blocks(image_fd: int, kept: Extents, start: int) -> "dict[int, bool]":
    """The disk's blocks the partition's kept bytes touch: whether those bytes are all zeros."""
    found = {}
    for block in touched_blocks(normalize(shift(kept, start))):
        base = block.number * BLOCK_SIZE - start
        found[block.number] = all(
            os.pread(image_fd, hi - lo, base + lo) == ZEROS[: hi - lo] for lo, hi in block.parts
        )
    return found
