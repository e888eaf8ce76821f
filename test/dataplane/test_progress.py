"""The copy's progress lines are true: on real disks (devkit layouts, the Debian disk of
devkit.debian) every line's percent rises, never passes 100, and the last line is 100.0% of a
total equal to the bytes the copy read for its plan: the allocated ranges, everything outside the
partitions and, for the trim method, the partitions it staged (issue #10: the total once left
bytes out and a real Debian disk printed `copy: 102.8% 478.0 MiB of 464.7 MiB`)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy, working_copy

from devkit import disks
from devkit.needs import BOOT_TOOLS
from devkit.pytest_ci import needs_tools

pytestmark = pytest.mark.needs_root

REPO = Path(__file__).resolve().parents[2]
DEBIAN_CACHE = REPO / "out" / "cache" / "debian-bookworm"
LINE = re.compile(
    r"^sparsecopy: (?P<phase>[^:]+(?:: [a-z]+)?): +(?P<percent>[0-9.]+)% .* of .*, "
    r".*/s, ETA \d+:\d\d, bytes (?P<done>\d+)/(?P<total>\d+)$"
)


def progress_lines(stderr: str, phase: str) -> list[tuple[float, int, int]]:
    """(percent, done, total) of every line of ``phase``, in order."""
    found = []
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match and match["phase"] == phase:
            found.append((float(match["percent"]), int(match["done"]), int(match["total"])))
    return found


def planned_bytes(summary: dict) -> int:
    """What the copy reads for its plan: allocated (or raw) ranges, the partition a trim method
    staged, and the bytes outside every partition."""
    planned = summary["outside_partitions_bytes"]
    for part in summary["partitions"]:
        planned += part["size"] if part["method"] == "trim" else part["allocated_bytes"]
    return planned


def copy_with_progress(source: Path, tmp_path: Path, *args: str) -> tuple[dict, str]:
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy(
            "copy", src, dst, "--verify", "--scratch", str(tmp_path), *args,
            env={"SPARSECOPY_PROGRESS_SECONDS": "0"},
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.summary, run.stderr


def assert_true_progress(summary: dict, stderr: str) -> list[tuple[float, int, int]]:
    lines = progress_lines(stderr, "copy")
    assert lines, stderr
    assert "internal error" not in stderr, stderr
    totals = {total for _, _, total in lines}
    assert totals == {planned_bytes(summary)}, (totals, summary)
    for (p1, d1, _), (p2, d2, _) in itertools.pairwise(lines):
        assert p1 <= p2 and d1 <= d2, lines
    assert all(0 <= percent <= 100 and done <= total for percent, done, total in lines), lines
    percent, done, total = lines[-1]
    assert (percent, done) == (100.0, total), lines[-1]
    assert all(p < 100 for p, d, t in lines if d < t), lines  # never 100.0% before the end
    return lines


@pytest.mark.parametrize(
    "builder, method",
    [
        (disks.build_gpt_efi_ext4, "allocated"),
        (disks.build_ext4_swap_raw_unwritten, "allocated"),
        (disks.build_btrfs, "allocated"),  # btrfs goes through the trim method's staging
        (disks.build_gpt_xfs, "trim"),
    ],
    ids=["gpt-bios-efi-ext4", "ext4-swap-raw-unwritten", "btrfs", "gpt-xfs-trim"],
)
def test_progress_of_devkit_disks_is_true(builder, method: str, tmp_path: Path) -> None:
    disk = builder(tmp_path / "disk.img")
    source = working_copy(disk, tmp_path / "source.img")
    summary, stderr = copy_with_progress(source.path, tmp_path, "--method", method)
    assert_true_progress(summary, stderr)


# Builds the Debian cache from the mirror when it is missing (~70 s once; test-boot reuses it).
@needs_tools(*BOOT_TOOLS)
def test_progress_of_a_real_debian_disk_is_true(tmp_path: Path) -> None:
    """The disk of the report: BIOS-boot + ESP + ext4 root, dirtied and copied while mounted."""
    from devkit.debian.snapshot_cache import dirty_debian_snapshot

    snapshot = tmp_path / "snapshot.img"
    dirty_debian_snapshot(snapshot, DEBIAN_CACHE)
    for method in ("allocated", "trim"):
        run_dir = tmp_path / method
        run_dir.mkdir()
        source = run_dir / "source.img"
        disks.run("cp", "--sparse=always", str(snapshot), str(source))  # replayed by the copy
        summary, stderr = copy_with_progress(source, run_dir, "--method", method)
        lines = assert_true_progress(summary, stderr)
        print(f"\n{method}: {len(lines)} lines, last {stderr.splitlines()[-3:]}")
        source.unlink()


def test_a_jobs_progress_lines_name_their_volume(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the Command document's job every volume starts its phases again: the line says which."""
    from sparsecopy import job, progress

    monkeypatch.setattr(progress, "VOLUME", [""])

    def fake_copy(options: object) -> dict:
        counter = progress.Progress("copy", 10, interval=0)
        counter.add(10)
        counter.maybe_report(force=True)
        return {}

    steps = job.Steps(find=lambda volume_id, name: f"/dev/fake-{volume_id}", copy=fake_copy)
    options = job.JobOptions("vol-1,vol-2", "vol-3,vol-4", "/dev/sdf,/dev/sdg", "/dev/sdh,/dev/sdi")
    for volume in job.volumes(options):
        job.copy_volume(volume, 2, options, None, steps)
    lines = [line for line in capsys.readouterr().err.splitlines() if "%" in line]
    assert [line.split(":")[1] for line in lines] == [" copy (volume 1/2)", " copy (volume 2/2)"]
    assert all(line.endswith("bytes 10/10") for line in lines), lines
