"""The seed method for one partition: stage its non-zero blocks in a sparse scratch image,
loop-mount it, fstrim (the kernel punches holes where the filesystem has free space), then copy
the image's remaining data to the target. Used for filesystems only the kernel can read."""

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Optional

from .blockdev import detach, mounted, run
from .copier import Copier
from .errors import Failure
from .extents import Extents, total
from .plan import RAW, PartPlan, scratch_room
from .progress import Progress, log
from .source_blocks import Held


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
) -> "tuple[int, int]":
    """Copy one partition by the trim method. Returns (source bytes read, target bytes written).

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
            plan.use(RAW, [], f"fstrim failed ({problem}); copied every non-zero block")
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
        finally:
            os.close(image_fd)
        plan.extents = [(plan.start + s, n) for s, n in kept]
        return staging.bytes_read, out.bytes_written
