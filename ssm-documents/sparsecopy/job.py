"""``job``: the Command document's whole run on the transfer instance.

The document passes its parameters as they are: comma lists of the source and target volume
ids and device names (job order), the method, jobs, verify and the presigned URL of the block
lists. The job fetches and unpacks the block lists (when there is a URL), then for each volume
finds both devices and copies the source onto the target (with the volume's block list when the
bundle has one; mode inspect: only inspect_disk each source; ``--target snapshot``: copies each
source straight into its already-started EBS snapshot, snapshot_copy.py), and prints the one bounded
JSON line the Lambdas parse: the summary on success
(exit 0), else the error with the volume it belongs to (exit 1). Everything else, including
each volume's full summary, goes to standard error; while the job runs, standard output is
pointed at standard error so that no child program can add a line.
"""

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Callable, NamedTuple, Optional

from . import bundle, progress
from .device import find_device
from .disk_copy import CopyOptions, copy_disk, inspect_disk
from .errors import Failure
from .plan import ALLOCATED
from .progress import log
from .snapshot_copy import SnapshotOptions, copy_to_snapshot, left_pending
from .summary import MAX_VOLUMES, Json, _count, dumps, error_line, join

PREFIX = "sparsecopy: "  # what log() starts every line with; the error line keeps it
SAME_COUNT = (
    "SourceVolumeIds, TargetVolumeIds, SourceDeviceNames and TargetDeviceNames must have the "
    "same number of items"
)
SNAPSHOT, VOLUME = "snapshot", "volume"  # --target
SAME_COUNT_SNAPSHOT = (
    "Target snapshot: SourceVolumeIds, SourceDeviceNames and TargetSnapshotIds must have the "
    "same number of items"
)
NO_TARGET_VOLUMES = (
    "Target snapshot: TargetVolumeIds and TargetDeviceNames must be empty (the copy goes into "
    "the snapshots of TargetSnapshotIds)"
)
NO_TARGET_SNAPSHOTS = "Target volume: TargetSnapshotIds must be empty"


class JobOptions(NamedTuple):
    source_volume_ids: str  # comma lists, job order
    target_volume_ids: str
    source_device_names: str
    target_device_names: str
    method: str = ALLOCATED
    jobs: int = 16
    verify: bool = True
    source_blocks_url: str = ""  # empty: copy without block lists
    scratch: str = "/var/tmp"
    mode: str = "copy"
    target: str = VOLUME  # or SNAPSHOT: the target lists are empty, target_snapshot_ids not
    target_snapshot_ids: str = ""  # comma list, job order


class Volume(NamedTuple):
    order: int  # position in the job: volume-<order>.json
    source_id: str
    target_id: str  # "" with --target snapshot
    source_device_name: str
    target_device_name: str
    target_snapshot_id: str = ""  # --target snapshot only


class Steps(NamedTuple):
    """What the job calls for each step (the tests stand in for the network)."""

    find: Callable[[str, Optional[str]], str] = find_device
    copy: Callable[[CopyOptions], Json] = copy_disk
    fetch: Callable[[str, str], None] = bundle.fetch
    inspect: Callable[[str, Optional[str]], Json] = inspect_disk
    put: Callable[[SnapshotOptions], Json] = copy_to_snapshot


REAL_STEPS = Steps()


class JobFailed(Exception):
    """The job stops: ``error`` is the line's text, ``source_id`` the volume it belongs to."""

    def __init__(self, error: str, source_id: str) -> None:
        super().__init__(error)
        self.error = error
        self.source_id = source_id


def _split(text: str) -> "list[str]":
    return text.split(",") if text else []


def _lists(options: JobOptions) -> "tuple[list[list[str]], str]":
    """The lists that must pair up, and what is wrong with the others ("" when nothing)."""
    sources, source_names = _split(options.source_volume_ids), _split(options.source_device_names)
    targets, target_names = _split(options.target_volume_ids), _split(options.target_device_names)
    snapshots = _split(options.target_snapshot_ids)
    if options.target != SNAPSHOT:
        problem = NO_TARGET_SNAPSHOTS if snapshots else ""
        return [sources, targets, source_names, target_names], problem
    if options.mode == "inspect":  # a dry run makes no target: only the sources are read
        return [sources, source_names], ""
    problem = NO_TARGET_VOLUMES if targets or target_names else ""
    return [sources, source_names, snapshots], problem


def volumes(options: JobOptions) -> list[Volume]:
    """The volume pairs; JobFailed when the lists do not pair up or a job would be too big."""
    lists, problem = _lists(options)
    first = options.source_volume_ids.split(",")[0]
    if problem:
        pass  # said above
    elif len({len(items) for items in lists}) != 1:
        problem = SAME_COUNT if options.target != SNAPSHOT else SAME_COUNT_SNAPSHOT
    elif not 1 <= len(lists[0]) <= MAX_VOLUMES:
        problem = f"{len(lists[0])} volumes: a job has 1 to {MAX_VOLUMES}"
    if problem:
        log(f"error: {problem}")
        raise JobFailed(problem, first)
    if options.target != SNAPSHOT:
        return [Volume(i, *items) for i, items in enumerate(zip(*lists))]
    count = len(lists[0])
    snapshots = lists[2] if len(lists) > 2 else [""] * count
    return [
        Volume(i, source, "", name, "", snapshot)
        for i, (source, name, snapshot) in enumerate(zip(lists[0], lists[1], snapshots))
    ]


def block_lists(url: str, work: str, steps: Steps) -> "dict[int, str]":
    """Each volume's block list file by index: none without a URL. A volume EBS would not list
    has no file and is copied without one."""
    if not url:
        return {}
    log("fetching the source block lists")
    archive = os.path.join(work, "blocks.tar.gz")
    steps.fetch(url, archive)
    directory = os.path.join(work, "blocks")
    os.mkdir(directory)
    return bundle.unpack(archive, directory)


def _error_text(exc: BaseException) -> str:
    """The error line's text for a failed step: the line the program logs, as ``copy`` does."""
    if isinstance(exc, Failure):
        message = f"error: {exc}"
    elif isinstance(exc, KeyboardInterrupt):
        message = "error: interrupted"
    else:
        message = f"error: internal error: {type(exc).__name__}: {exc}"
    log(message)
    return PREFIX + message


def _find_source(volume: Volume, options: JobOptions, steps: Steps) -> str:
    """The source's device; with a snapshot target a failure names the snapshot left pending."""
    try:
        return steps.find(volume.source_id, volume.source_device_name)
    except Failure as exc:
        if options.target != SNAPSHOT or options.mode == "inspect":
            raise
        raise Failure(f"{left_pending(volume.target_snapshot_id)}: {exc}") from exc


def _put_volume(
    volume: Volume, source: str, options: JobOptions, blocks: Optional[str], steps: Steps
) -> Json:
    log(f"copying {source} -> snapshot {volume.target_snapshot_id}")
    put = SnapshotOptions(
        source, volume.target_snapshot_id, options.method, options.jobs, options.verify, blocks
    )
    return steps.put(put)


def copy_volume(
    volume: Volume, count: int, options: JobOptions, blocks: Optional[str], steps: Steps
) -> Json:
    """Find both devices and copy (or the source, and put it into its snapshot); JobFailed (with
    this volume's source) when any step fails."""
    into = volume.target_id or volume.target_snapshot_id
    log(f"volume {volume.order + 1}/{count}: {volume.source_id} -> {into}")
    progress.VOLUME[0] = f" (volume {volume.order + 1}/{count})"
    try:
        source = _find_source(volume, options, steps)
        if options.mode == "inspect":
            return steps.inspect(source, blocks)
        if options.target == SNAPSHOT:
            return _put_volume(volume, source, options, blocks, steps)
        target = steps.find(volume.target_id, volume.target_device_name)
        log(f"copying {source} -> {target}")
        copy = CopyOptions(
            source, target, options.method, options.scratch, options.jobs, options.verify, blocks
        )
        return steps.copy(copy)
    except (Exception, KeyboardInterrupt) as exc:
        raise JobFailed(_error_text(exc), volume.source_id) from exc


def _copy_all(options: JobOptions, pairs: list[Volume], steps: Steps) -> "list[Json]":
    with tempfile.TemporaryDirectory(prefix="sparsecopy-job-") as work:
        try:
            lists = block_lists(options.source_blocks_url, work, steps)
        except Failure as exc:
            log(f"error: {exc}")
            raise JobFailed(str(exc), pairs[0].source_id) from exc
        return [
            copy_volume(volume, len(pairs), options, lists.get(volume.order), steps)
            for volume in pairs
        ]


def run(options: JobOptions, steps: Optional[Steps] = None) -> "tuple[int, str]":
    """(exit code, the one standard output line)."""
    steps = steps or REAL_STEPS
    try:
        pairs = volumes(options)
        summaries = _copy_all(options, pairs, steps)
        sources = [v.source_id for v in pairs]
        if options.mode == "inspect":
            keys = ("size", "live_bytes", "bytes_to_read", "predicted_blocks", "held_blocks")
            found = [{k: _count(s.get(k)) for k in keys} for s in summaries]
            entries = [dict(e, sourceVolumeId=i) for i, e in zip(sources, found)]
            return 0, dumps({"mode": "inspect", "volumes": entries})
        targets = [v.target_id or None for v in pairs]
        line, details = join(sources, targets, summaries)
    except JobFailed as failed:
        return 1, error_line(failed.error, failed.source_id)
    except (Exception, KeyboardInterrupt) as exc:
        first = options.source_volume_ids.split(",")[0]
        return 1, error_line(_error_text(exc), first)
    for detail in details:
        log(detail)
    return 0, line


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Standard output (file descriptor 1, inherited by child programs) goes to standard
    error until the job prints its line."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(options: JobOptions, steps: Optional[Steps] = None) -> int:
    with stdout_to_stderr():
        code, line = run(options, steps)
    print(line, flush=True)
    return code
