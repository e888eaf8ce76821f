import os
from pathlib import Path

import pytest

from bench.system import BenchError, IoCounters, Resources
from bench.throttle import BLKIO, throttled_reads
from devkit.loop import serves

# (on devkit/pytest_ci.py's ALLOWED_SKIPS: a machine of this kind may truly lack it)
needs_blkio = pytest.mark.skipif(
    not (BLKIO / "blkio.throttle.read_bps_device").exists(),
    reason="no cgroup-v1 blkio throttling (a kernel with only the unified cgroup hierarchy)",
)


def test_resources_refuse_to_detach_a_device_they_did_not_attach() -> None:
    with pytest.raises(BenchError, match="did not attach"):
        Resources().detach("/dev/loop0")


def test_io_counter_deltas_are_in_bytes() -> None:
    before, after = IoCounters(10, 100, 0), IoCounters(14, 108, 2)
    assert after.bytes_since(before) == (4 * 512, 8 * 512, 2 * 512)


def test_no_limits_means_no_cgroup() -> None:
    home = Path("/proc/self/cgroup").read_text()
    with throttled_reads("/dev/null", 0, 0):
        assert Path("/proc/self/cgroup").read_text() == home


@pytest.mark.needs_root
@needs_blkio
def test_throttle_caps_the_device_inside_and_cleans_up_after(tmp_path: Path) -> None:
    backing = tmp_path / "disk.img"
    backing.write_bytes(bytes(1 << 20))
    res = Resources()
    try:
        device = res.attach(backing)
        rdev = os.stat(device).st_rdev
        group = BLKIO / f"ebs-bench-{os.getpid()}"
        with throttled_reads(device, 4 << 20, 100):
            assert f"ebs-bench-{os.getpid()}" in Path("/proc/self/cgroup").read_text()
            bps = (group / "blkio.throttle.read_bps_device").read_text()
            iops = (group / "blkio.throttle.read_iops_device").read_text()
            assert f"{os.major(rdev)}:{os.minor(rdev)} {4 << 20}" in bps
            assert f"{os.major(rdev)}:{os.minor(rdev)} 100" in iops
        assert not group.exists()
        assert "ebs-bench" not in Path("/proc/self/cgroup").read_text()
    finally:
        assert res.close() == []


@pytest.mark.needs_root
@needs_blkio
def test_detach_stops_once_the_device_no_longer_serves_our_file(tmp_path: Path) -> None:
    backing = tmp_path / "disk.img"
    backing.write_bytes(bytes(1 << 20))
    res = Resources()
    device = res.attach(backing, offset=4096)
    try:
        assert serves(device, backing, 4096)
        assert not serves(device, backing, 0)
        assert not serves(device, tmp_path / "other.img", 4096)
        res.detach(device)
        assert not serves(device, backing, 4096)
        with pytest.raises(BenchError, match="did not attach"):
            res.detach(device)  # gone from our list: a second detach could hit someone else's
    finally:
        assert res.close() == []
