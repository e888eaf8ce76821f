"""Optional: make the source device slow, like a volume restored from a snapshot.

Uses the cgroup-v1 blkio throttle (this machine has no device-mapper for dm-delay): the bench
moves itself into its own blkio cgroup for the timed part of each method, so every process it
starts (dd, ddpt, sparsecopy, e2fsck, ...) is capped at the same read rate (bytes/s and
requests/s) on the source device. Only the source is throttled; the scratch image and the
target run at full speed. It caps throughput; it does not add per-request latency.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.system import BenchError

BLKIO = Path("/sys/fs/cgroup/blkio")


def _own_blkio_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return BLKIO / path.lstrip("/")
    raise BenchError(
        "this process is in no blkio cgroup; cgroup-v1 blkio is needed to throttle the source"
    )


@contextmanager
def throttled_reads(device: str, bytes_per_second: int, iops: int) -> Iterator[None]:
    """While inside, reads of `device` by this process and its children are capped (0 = no cap)."""
    if not bytes_per_second and not iops:
        yield
        return
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        raise BenchError(f"{BLKIO} has no blkio.throttle files; cannot throttle the source")
    home = _own_blkio_cgroup()
    group = BLKIO / f"ebs-bench-{os.getpid()}"
    group.mkdir(exist_ok=True)
    rdev = os.stat(device).st_rdev
    for limit, name in ((bytes_per_second, "read_bps_device"), (iops, "read_iops_device")):
        if limit:
            (group / f"blkio.throttle.{name}").write_text(
                f"{os.major(rdev)}:{os.minor(rdev)} {limit}\n"
            )
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    try:
        yield
    finally:
        (home / "cgroup.procs").write_text(f"{os.getpid()}\n")
        group.rmdir()
