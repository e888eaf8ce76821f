"""blocks → a target volume (``copy``): every block of the set written with plain writes of the
whole masked 512 KiB block, zeros included.

Plain writes, never discard, write-zeroes or fallocate: the target is a never-written EBS volume
that CreateSnapshot then snapshots, and what those requests leave in a snapshot is not
documented; a written block of zeros is stored like any other. The target already reads as
zeros wherever nothing is written, so a block's free bytes written as zeros change nothing but
make the block exactly what the snapshot sink would put.

Restored volumes are latency-bound, so ``jobs`` blocks are read and written at a time (threads
release the GIL in os.preadv/os.pwritev). Ranges in ``keep_out`` (partitions the trim method
writes itself) are never written, even inside a block of the set.
"""

import concurrent.futures
import mmap
import threading
from collections.abc import Iterable
from typing import Callable, NamedTuple

from .blocks import ZEROS, Block, Source
from .copier import read_exactly, write_exactly
from .errors import Failure
from .extents import Extents, complement
from .progress import Progress
from .source_blocks import BLOCK_SIZE


class Written(NamedTuple):
    """What a copy onto a volume read of the source and wrote of the target."""

    bytes_read: int
    bytes_written: int
    blocks_written: int
    zero_blocks: int  # of the blocks written, those holding only zeros


def each_in_parallel(
    fn: Callable[[Block], None], blocks: Iterable[Block], jobs: int, progress: Progress
) -> None:
    """``fn`` for every block, ``jobs`` at a time (at most twice that queued: memory stays
    small); progress counts each block's weight; the first failure stops it and is raised."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    pending: set[concurrent.futures.Future[int]] = set()

    def one(block: Block) -> int:
        fn(block)
        return block.weight

    try:
        for block in blocks:
            while len(pending) >= jobs * 2:
                done, pending = concurrent.futures.wait(
                    pending, timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    progress.add(future.result())
                progress.maybe_report()
            pending.add(pool.submit(one, block))
        for future in concurrent.futures.as_completed(pending):
            progress.add(future.result())
            progress.maybe_report()
        pending = set()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


class VolumeSink:
    """Writes blocks of ``source`` onto the target descriptor at the same offsets."""

    def __init__(self, source: Source, target_fd: int, jobs: int, keep_out: Extents) -> None:
        self.source, self.target_fd, self.jobs = source, target_fd, jobs
        self.keep_out = keep_out
        # the blocks keep_out's edges lie in (a trimmed partition writes its part of them):
        # whether the sink wrote them all zeros, so that such a block is counted once
        self._watch = {o // BLOCK_SIZE for s, n in keep_out for o in (s, s + n - 1)}
        self.edges: dict[int, bool] = {}
        self.blocks_written = 0
        self.zero_blocks = 0
        self.bytes_written = 0
        self._lock = threading.Lock()
        self._local = threading.local()

    def _spans(self, offset: int, length: int) -> Extents:
        """The block's bytes to write: all of them but those of ``keep_out``."""
        if not self.keep_out:
            return [(offset, length)]
        return complement(self.keep_out, offset, offset + length)

    def _write_one(self, block: Block) -> None:
        offset = block.number * BLOCK_SIZE
        length = min(BLOCK_SIZE, self.source.size - offset)
        buf = self.source.fill(block)
        zero = buf[:length] == ZEROS[:length]
        view = memoryview(buf)
        written = 0
        try:
            for start, count in self._spans(offset, length):
                lo = start - offset
                write_exactly(self.target_fd, view[lo : lo + count], start)
                written += count
        finally:
            view.release()
        with self._lock:
            if block.number in self._watch:
                self.edges[block.number] = zero
            self.blocks_written += 1
            self.zero_blocks += zero
            self.bytes_written += written

    def _target_buffer(self) -> mmap.mmap:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = mmap.mmap(-1, BLOCK_SIZE)
        return buf

    def write(self, blocks: Iterable[Block], progress: Progress) -> None:
        """Write every block (its masked 512 KiB, zeros included)."""
        each_in_parallel(self._write_one, blocks, self.jobs, progress)

    def compare(self, target_fd: int, blocks: Iterable[Block], progress: Progress) -> None:
        """Verify: every block of the target reads as the source's masked block (outside
        ``keep_out``); Failure at the first that does not."""

        def check(block: Block) -> None:
            offset = block.number * BLOCK_SIZE
            length = min(BLOCK_SIZE, self.source.size - offset)
            expected = self.source.read(block, count=False)
            buf = self._target_buffer()
            view = memoryview(buf)
            try:  # the whole block in one aligned read (the target may be open with O_DIRECT)
                read_exactly(target_fd, view, offset, length, "the target")
            finally:
                view.release()
            for start, count in self._spans(offset, length):
                lo = start - offset
                if buf[lo : lo + count] != expected[lo : lo + count]:
                    raise Failure(
                        f"verify: target differs from source in block {block.number} "
                        f"(bytes {start}..{start + count})"
                    )

        each_in_parallel(check, blocks, self.jobs, progress)
