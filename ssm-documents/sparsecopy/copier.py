"""Parallel extent copy: many large aligned reads in flight, every wanted byte written, zeros
included (the trim method's staging and write-back; blocks.py and volume_sink.py copy the
plan's blocks).

On a volume restored from a snapshot every first read of a block is an S3 fetch, so throughput
comes from concurrency (threads release the GIL in os.preadv/os.pwritev). Buffers are mmap'ed
(page aligned) so the devices can be opened with O_DIRECT. Zeros are written like any other
bytes: a block of a needed range that holds only zeros must still be stored (issue 19: an
absent block reads as random bytes on an encrypted restore).
"""

import concurrent.futures
import mmap
import os
import threading
from typing import Callable, Optional

from .errors import Failure
from .extents import Extents, normalize, split
from .progress import Progress

IO_SIZE = 1024 * 1024
MERGE_GAP = 64 * 1024


def open_device(path: str, write: bool) -> int:
    """Open for direct I/O when the device allows it, else buffered."""
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_CLOEXEC", 0)
    direct = getattr(os, "O_DIRECT", 0)
    try:
        return os.open(path, flags | direct)
    except OSError:
        pass
    try:
        return os.open(path, flags)
    except OSError as exc:
        raise Failure(f"cannot open {path}: {exc.strerror}") from exc


Unit = tuple[int, int, tuple[tuple[int, int], ...]]  # (offset, length, wanted parts within)


def read_units(extents: Extents, merge_gap: int) -> list[Unit]:
    """Cut the extents into reads of at most IO_SIZE bytes (on IO_SIZE boundaries).

    Extents less than ``merge_gap`` apart share one read: on a restored volume the first read of
    any byte fetches its whole 512 KiB snapshot block, so the gap costs no extra fetch and saves
    a request. Only the wanted parts of a read are ever written or compared.
    """
    wanted = normalize(extents)
    units: list[Unit] = []
    first = 0
    for start, length in split(normalize(wanted, merge_gap), IO_SIZE):
        end = start + length
        while first < len(wanted) and wanted[first][0] + wanted[first][1] <= start:
            first += 1
        parts = []
        index = first
        while index < len(wanted) and wanted[index][0] < end:
            lo, hi = max(wanted[index][0], start), min(wanted[index][0] + wanted[index][1], end)
            parts.append((lo, hi))
            index += 1
        if parts:  # read from the first wanted byte to the last, never a gap's edges
            lo, hi = parts[0][0], parts[-1][1]
            units.append((lo, hi - lo, tuple((a - lo, b - lo) for a, b in parts)))
    return units


def _wanted(parts: tuple[tuple[int, int], ...]) -> int:
    """Bytes of a unit's wanted parts: what progress counts (the extents' total), without the
    gaps a merged read also fetches."""
    return sum(hi - lo for lo, hi in parts)


def read_exactly(fd: int, view: memoryview, offset: int, length: int, what: str) -> None:
    """``length`` bytes of ``fd`` at ``offset`` into ``view``; Failure naming ``what`` when a
    read fails or the device ends first."""
    done = 0
    while done < length:
        try:
            n = os.preadv(fd, [view[done:length]], offset + done)
        except OSError as exc:
            raise Failure(f"reading {what} at byte {offset + done} failed: {exc.strerror}") from exc
        if n == 0:
            raise Failure(f"{what} ended at byte {offset + done}, before the planned range")
        done += n


def write_exactly(fd: int, view: memoryview, offset: int) -> None:
    """All of ``view`` to the target ``fd`` at ``offset`` (plain writes); Failure when one
    fails."""
    done = 0
    while done < len(view):
        try:
            done += os.pwritev(fd, [view[done:]], offset + done)
        except OSError as exc:
            raise Failure(
                f"writing the target at byte {offset + done} failed: {exc.strerror}"
            ) from exc


class Copier:
    """Copies extents from one descriptor to another, ``jobs`` requests at a time."""

    def __init__(
        self,
        jobs: int,
        merge_gap: int = MERGE_GAP,
        on_read: Optional[Callable[[int, int], None]] = None,
    ) -> None:
        self.jobs = jobs
        # With --source-blocks the extents lie in listed 512 KiB blocks; a gap shorter than a
        # block never spans an unlisted one, so merged reads stay inside the list.
        self.merge_gap = merge_gap
        self.on_read = on_read  # told (offset, length) of every read of the first device
        self.bytes_read = 0
        self.bytes_written = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _buffer(self) -> mmap.mmap:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = mmap.mmap(-1, IO_SIZE)
            self._local.buf = buf
        return buf

    def _copy_unit(self, src: int, dst: int, unit: Unit, shift: int) -> int:
        offset, length, parts = unit
        buf = self._buffer()
        view = memoryview(buf)
        try:
            read_exactly(src, view, offset, length, "the source")
            if self.on_read:
                self.on_read(offset, length)
            written = 0
            for part_start, part_end in parts:
                write_exactly(dst, view[part_start:part_end], offset + part_start + shift)
                written += part_end - part_start
        finally:
            view.release()
        with self._lock:
            self.bytes_read += length
            self.bytes_written += written
        return _wanted(parts)

    def _compare_unit(self, a: int, b: int, unit: Unit, shift: int) -> int:
        offset, length, parts = unit
        buf_a = self._buffer()
        buf_b = getattr(self._local, "buf_b", None)
        if buf_b is None:
            buf_b = mmap.mmap(-1, IO_SIZE)
            self._local.buf_b = buf_b
        view_a, view_b = memoryview(buf_a), memoryview(buf_b)
        try:
            read_exactly(a, view_a, offset, length, "the source")
            if self.on_read:
                self.on_read(offset, length)
            read_exactly(b, view_b, offset + shift, length, "the target")
            for lo, hi in parts:
                if buf_a[lo:hi] != buf_b[lo:hi]:
                    raise Failure(
                        f"verify: target differs from source in bytes {offset + lo}..{offset + hi}"
                    )
        finally:
            view_a.release()
            view_b.release()
        return _wanted(parts)

    def _run(
        self,
        fn: Callable[[int, int, Unit, int], int],
        a: int,
        b: int,
        extents: Extents,
        shift: int,
        progress: Progress,
    ) -> None:
        units = read_units(extents, self.merge_gap)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        pending: list[concurrent.futures.Future[int]] = []
        try:
            index = 0
            while index < len(units) or pending:
                while index < len(units) and len(pending) < self.jobs * 2:
                    pending.append(pool.submit(fn, a, b, units[index], shift))
                    index += 1
                done, still = concurrent.futures.wait(
                    pending, timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED
                )
                pending = list(still)
                for future in done:
                    progress.add(future.result())
                progress.maybe_report()
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True)

    def copy(
        self, src: int, dst: int, extents: Extents, progress: Progress, shift: int = 0
    ) -> None:
        """Copy each extent of ``src`` to the same offset (+ ``shift``) of ``dst``."""
        self._run(self._copy_unit, src, dst, extents, shift, progress)

    def compare(self, a: int, b: int, extents: Extents, progress: Progress, shift: int = 0) -> None:
        """Raise Failure at the first extent whose bytes differ between ``a`` and ``b``."""
        self._run(self._compare_unit, a, b, extents, shift, progress)
