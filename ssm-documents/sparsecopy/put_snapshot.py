"""``sparsecopy put-snapshot``: write an image file or block device as a new EBS snapshot through
the EBS direct APIs, putting every 512 KiB block that holds data, zeros included (a block never
put reads as zeros on an unencrypted restore but as random bytes on an encrypted one: issue 19,
awslabs/coldsnap #395/#396).

Holes are skipped without reading (SEEK_DATA / SEEK_HOLE); every other block is read and put.
CompleteSnapshot is called only after every put succeeded; on any
failure the snapshot is left open (pending) - StartSnapshot's Timeout cancels it - and the error
names it."""

import concurrent.futures
import errno
import hashlib
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Callable, NamedTuple, Optional

from . import credentials
from .blockdev import size_of
from .blocks import Block
from .ebs_direct import BLOCK, ApiError, Client, aggregate_checksum
from .errors import Failure
from .extents import Extents, align, split
from .progress import Progress, log
from .shared import DOCUMENT_TIMEOUT_SECONDS

GIB = 1 << 30
ZEROS = bytes(BLOCK)
MAX_JOBS = 128  # AWS: up to ~100 connections per client reach ~500 MB/s
VERIFY_POLL_SECONDS = 2.0
# The run's budget (the Command document passes its TimeoutSeconds): --verify waits for EBS to
# seal the snapshot as long as the budget lasts; without one, as long as a Command may run.
BUDGET_VARIABLE = "SPARSECOPY_BUDGET_SECONDS"
BUDGET_DEFAULT_SECONDS = float(DOCUMENT_TIMEOUT_SECONDS)
STARTED = time.monotonic()


class PutOptions(NamedTuple):
    image: str
    size_gib: int
    kms_key_arn: Optional[str] = None
    encrypted: bool = False
    tags: "tuple[tuple[str, str], ...]" = ()
    description: Optional[str] = None
    client_token: Optional[str] = None
    jobs: int = 32
    timeout_minutes: int = 60
    verify: bool = False


def data_extents(fd: int, size: int) -> Extents:
    """Byte ranges that may hold data: SEEK_DATA / SEEK_HOLE; the whole range where the file
    or device cannot tell (never "no data" on an error other than ENXIO)."""
    out: Extents = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break
            return [*out, (pos, size - pos)]
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        out.append((start, end - start))
        pos = end
    return out


def candidate_blocks(fd: int, size: int) -> "list[int]":
    """Indexes of the 512 KiB blocks that touch data."""
    pieces = split(align(data_extents(fd, size), BLOCK, -(-size // BLOCK) * BLOCK), BLOCK)
    return sorted({start // BLOCK for start, _ in pieces})


def read_block(fd: int, index: int, size: int) -> bytes:
    """The block's bytes, padded with zeros past the end of the image."""
    offset, parts = index * BLOCK, []
    want = min(BLOCK, size - offset)
    while want > 0:
        chunk = os.pread(fd, want, offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
        want -= len(chunk)
    data = b"".join(parts)
    return data + bytes(BLOCK - len(data)) if len(data) < BLOCK else data


def start_spec(opts: PutOptions) -> "dict[str, object]":
    spec: dict[str, object] = {
        "VolumeSize": opts.size_gib,
        "ClientToken": opts.client_token or str(uuid.uuid4()),
        "Timeout": opts.timeout_minutes,
    }
    if opts.tags:
        spec["Tags"] = [{"Key": k, "Value": v} for k, v in opts.tags]
    if opts.description:
        spec["Description"] = opts.description
    if opts.encrypted or opts.kms_key_arn:
        spec["Encrypted"] = True
    if opts.kms_key_arn:
        spec["KmsKeyArn"] = opts.kms_key_arn
    return spec


def run_deadline(env: "Optional[dict[str, str]]" = None) -> float:
    """time.monotonic() at which the run's budget ends."""
    raw = (os.environ if env is None else env).get(BUDGET_VARIABLE, "")
    try:
        budget = float(raw) if raw else BUDGET_DEFAULT_SECONDS
    except ValueError:
        raise Failure(f"{BUDGET_VARIABLE}={raw!r} is not a number of seconds") from None
    return STARTED + budget


class Uploader:
    """Puts blocks into one open snapshot with up to ``jobs`` puts in flight (fewer while EBS
    throttles: Client.pacer): ``read(block)`` gives a block's 512 KiB (read again for a retried
    put). Every block given is put, all-zero ones included (``zero_blocks`` counts them). A
    block whose put fails with a retryable error after the client's own retries is queued
    again; the upload fails on any other error, or when no put has succeeded for the client's
    RetryPolicy.stall seconds."""

    def __init__(
        self,
        client: Client,
        snapshot_id: str,
        read: Callable[[Block], bytes],
        jobs: int,
    ) -> None:
        self.client, self.snapshot_id = client, snapshot_id
        self.read, self.jobs = read, jobs
        self.digests: dict[int, bytes] = {}
        self.zero_blocks = 0
        self.errors: list[tuple[int, Exception]] = []
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.again: deque[Block] = deque()
        self.in_flight = 0
        self.requeued = 0
        self.last_success = client.policy.clock()
        client.started(snapshot_id)  # this run's snapshot: EBS may not find it at first

    def _one(self, block: Block, progress: Progress) -> None:
        done = True
        try:
            if not self.stop.is_set():
                done = self._put(block)
        except Exception as exc:
            self.errors.append((block.number, exc))
            self.stop.set()
        finally:
            if done:
                progress.add(block.weight)
            with self.changed:
                self.in_flight -= 1
                self.changed.notify_all()

    def _put(self, block: Block) -> bool:
        """Put one block; False when it was queued again."""
        first = [self.read(block)]
        zero = first[0] == ZEROS

        def read() -> bytes:  # the first attempt's bytes, then read again
            return first.pop() if first else self.read(block)

        try:
            digest = self.client.put_block(self.snapshot_id, block.number, read)
        except ApiError as exc:
            policy = self.client.policy
            stalled = policy.clock() - self.last_success >= policy.stall
            if not exc.retryable or stalled:
                raise
            with self.changed:
                self.again.append(block)
                self.requeued += 1
            return False
        self.digests[block.number] = digest
        self.last_success = self.client.policy.clock()
        if zero:
            with self.changed:
                self.zero_blocks += 1
        return True

    def _next(self, blocks: "Iterator[Block]", wait: float) -> Optional[Block]:
        """The next block to put: a queued-again one first; None when all is done (or stopped)."""
        with self.changed:
            while not self.stop.is_set():
                if self.again:
                    return self.again.popleft()
                block = next(blocks, None)
                if block is not None:
                    return block
                if not self.in_flight:
                    return None
                self.changed.wait(wait)  # puts in flight may come back
        return None

    def run(self, blocks: "Iterable[Block]", progress: Progress) -> "dict[int, bytes]":
        slots = threading.BoundedSemaphore(self.jobs * 2)  # bounded queue: memory stays small
        wait = max(progress.interval, 0.2)
        source = iter(blocks)
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            while True:
                while not slots.acquire(timeout=wait):
                    progress.maybe_report()
                block = self._next(source, wait)
                if block is None:
                    slots.release()
                    break
                with self.changed:
                    self.in_flight += 1
                future = pool.submit(self._one, block, progress)
                future.add_done_callback(lambda _: slots.release())
                progress.maybe_report()
        progress.maybe_report(force=not self.errors)
        if self.errors:
            index, exc = min(self.errors, key=lambda e: e[0])
            more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            raise Failure(f"block {index}: {exc}{more}")
        return self.digests


def sealed_blocks(
    client: Client, snapshot_id: str, deadline: Optional[float] = None
) -> "dict[int, str]":
    """ListSnapshotBlocks once EBS has sealed the snapshot: CompleteSnapshot answers `pending`
    and starts an asynchronous seal; until it ends the read APIs refuse the snapshot with a
    ValidationException or do not find it (ResourceNotFoundException, coldsnap #141), so those
    answers are polled for until ``deadline`` (time.monotonic(); the run's budget by default)."""
    deadline = run_deadline() if deadline is None else deadline
    while True:
        try:
            return client.list_blocks(snapshot_id)
        except ApiError as exc:
            sealing = exc.code == "ValidationException" or exc.not_found
            if not sealing or time.monotonic() >= deadline:
                raise
        client.policy.sleep(VERIFY_POLL_SECONDS)


def verify(
    client: Client,
    snapshot_id: str,
    digests: "dict[int, bytes]",
    jobs: int,
    expected: Optional[Callable[[int], bytes]] = None,
    progress: Optional[Progress] = None,
) -> int:
    """Read the completed snapshot back: exactly the put blocks, each with the digest it was put
    with, or, with ``expected``, byte for byte what ``expected(index)`` reads again."""
    tokens = sealed_blocks(client, snapshot_id)
    if set(tokens) != set(digests):
        extra, missing = set(tokens) - set(digests), set(digests) - set(tokens)
        raise Failure(
            f"snapshot {snapshot_id}: blocks differ: extra {sorted(extra)[:5]}, "
            f"missing {sorted(missing)[:5]}"
        )

    def check(index: int) -> None:
        data = client.get_block(snapshot_id, index, tokens[index])
        if expected is not None:
            same = data == expected(index)
        else:
            same = hashlib.sha256(data).digest() == digests[index]
        if not same:
            raise Failure(f"snapshot {snapshot_id}: block {index} reads back different data")
        if progress is not None:
            progress.add(BLOCK)
            progress.maybe_report()

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(check, sorted(tokens)))
    if progress is not None:
        progress.maybe_report(force=True)
    return len(tokens)


def open_client() -> Client:
    """The client of this instance: credentials, region and endpoint from credentials.py."""
    region = credentials.region()
    return Client(credentials.endpoint(region), region, credentials.CredentialSource())


def put_snapshot(opts: PutOptions, client: Optional[Client] = None) -> "dict[str, object]":
    if not 1 <= opts.jobs <= MAX_JOBS:
        raise Failure(f"--jobs must be 1-{MAX_JOBS}")
    if not 10 <= opts.timeout_minutes <= 4320:
        raise Failure("--timeout-minutes must be 10-4320 (StartSnapshot's Timeout)")
    fd = os.open(opts.image, os.O_RDONLY)
    try:
        size = size_of(fd)
        if size > opts.size_gib * GIB:
            raise Failure(f"{opts.image} holds {size} bytes: more than --size-gib {opts.size_gib}")
        return _put(client or open_client(), opts, fd, size)
    finally:
        os.close(fd)


def _put(client: Client, opts: PutOptions, fd: int, size: int) -> "dict[str, object]":
    started = time.monotonic()
    indexes = candidate_blocks(fd, size)
    try:
        snapshot_id = str(client.start_snapshot(start_spec(opts))["SnapshotId"])
    except ApiError as exc:
        raise Failure(f"StartSnapshot: {exc}") from exc
    log(f"put-snapshot: {snapshot_id} started, {len(indexes)} blocks to read")
    left_open = (
        f"snapshot {snapshot_id} NOT completed, left pending until its "
        f"{opts.timeout_minutes}-minute timeout"
    )
    try:
        progress = Progress("put-snapshot", len(indexes) * BLOCK)

        def read(block: Block) -> bytes:
            return read_block(fd, block.number, size)

        uploader = Uploader(client, snapshot_id, read, opts.jobs)
        digests = uploader.run((Block(index) for index in indexes), progress)
        checksum = aggregate_checksum(digests)
        status = client.complete_snapshot(snapshot_id, len(digests), checksum)
    except (Failure, ApiError) as exc:
        raise Failure(f"{left_open}: {exc}") from exc
    summary: dict[str, object] = {
        "snapshotId": snapshot_id,
        "status": status,
        "blocks": len(digests),
        "zero_blocks": uploader.zero_blocks,
        "bytes": len(digests) * BLOCK,
        "checksum": checksum,
        "retries": client.retries,
    }
    if opts.verify:
        try:
            summary["verifiedBlocks"] = verify(client, snapshot_id, digests, opts.jobs)
        except (Failure, ApiError) as exc:
            raise Failure(f"snapshot {snapshot_id} completed but does not verify: {exc}") from exc
        summary["status"] = "completed"
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary
