"""The command line contract: errors, failure marking, inspect, the zipped program, device."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import sys
import zipapp
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PROGRAM, attached, blank_like, sparsecopy

from devkit import chunks
from devkit import disks as images

pytestmark = pytest.mark.needs_root

VOLUME = "vol-0123456789abcdef0"


def _sha(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> images.DiskImage:
    return images.build_gpt_efi_ext4(tmp_path_factory.mktemp("cli") / "source.img")


@pytest.fixture
def source(disk: images.DiskImage, tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    chunks.copy_image(disk.path, path)  # the image's allocation, written zeros included
    return path


def _assert_one_error_line(run, text: str) -> None:
    assert run.returncode != 0
    assert run.stdout == "", "errors must not print anything on stdout"
    assert text in run.error_line
    assert run.error_line.startswith("sparsecopy: error: ")


def test_target_smaller_than_source_is_refused(source: Path, tmp_path: Path) -> None:
    small = tmp_path / "small.img"
    images.create_sparse(small, source.stat().st_size - 1024 * 1024)
    with attached(source) as src, attached(small) as dst:
        run = sparsecopy("copy", src, dst)
    _assert_one_error_line(run, "target is smaller than source")
    assert images.written_chunks(small) == 0


def test_mounted_source_is_refused(tmp_path: Path) -> None:
    bare = images.build_bare_ext4(tmp_path / "bare.img")
    target = blank_like(bare.path, tmp_path / "target.img")
    with attached(bare.path) as src, attached(target) as dst, images.mounted(src, "ext4"):
        run = sparsecopy("copy", src, dst)
    _assert_one_error_line(run, "is mounted")
    assert images.written_chunks(target) == 0


def test_target_with_data_is_refused(source: Path, tmp_path: Path) -> None:
    used = blank_like(source, tmp_path / "used.img")
    images.write_random_bytes(used, 4096, 4096, seed=1)
    with attached(source) as src, attached(used) as dst:
        run = sparsecopy("copy", src, dst)
    _assert_one_error_line(run, "is not blank")


def test_same_device_is_refused(source: Path) -> None:
    with attached(source) as src:
        run = sparsecopy("copy", src, src)
    _assert_one_error_line(run, "same device")


@contextlib.contextmanager
def _tiny_tmpfs(tmp_path: Path, size: str = "1m") -> Iterator[Path]:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    images.run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt))
    try:
        yield mnt
    finally:
        images.run("umount", str(mnt))


def test_trim_without_scratch_room_fails_before_writing(source: Path, tmp_path: Path) -> None:
    target = blank_like(source, tmp_path / "target.img")
    with (
        _tiny_tmpfs(tmp_path) as scratch,
        attached(source) as src,
        attached(target) as dst,
    ):
        run = sparsecopy("copy", src, dst, "--method", "trim", "--scratch", str(scratch))
    _assert_one_error_line(run, "pass --scratch on a larger disk")
    assert images.written_chunks(target) == 0


def test_failure_while_writing_marks_the_target_failed(source: Path, tmp_path: Path) -> None:
    """The target's backing store fills up mid-copy (ENOSPC): the copy stops, the target gets
    the failure mark and carries no partition table."""
    with _tiny_tmpfs(tmp_path, "12m") as small:
        target = blank_like(source, small / "target.img")
        with open(target, "r+b") as f:
            f.write(bytes(4096))  # zeros keep it blank, and the mark needs no new space
        with attached(source) as src, attached(target) as dst:
            run = sparsecopy("copy", src, dst)
        _assert_one_error_line(run, "writing the target at byte")
        assert "marked failed" in run.stderr
        with open(target, "rb") as f:
            assert f.read(17) == b"SPARSECOPY-FAILED"
        probe = subprocess.run(["blkid", "-p", str(target)], capture_output=True, text=True)
        assert "PTTYPE" not in probe.stdout, "a failed target must not look like a disk"


def test_inspect_writes_nothing_even_on_a_crashed_source(tmp_path: Path) -> None:
    crashed = images.build_bare_ext4(tmp_path / "crashed.img", crash=True)
    before = _sha(crashed.path)
    with attached(crashed.path) as src:
        run = sparsecopy("inspect", src)
    assert run.returncode == 0, run.stderr
    plan = run.summary
    assert _sha(crashed.path) == before, "inspect changed the source"
    (part,) = plan["partitions"]
    assert (part["fs"], part["method"]) == ("ext4", "allocated"), part
    # Before replay the map may even be unreadable (bitmap checksums from different moments).
    assert "before journal replay" in part["note"]
    assert plan["table"] == "none"


def test_zipped_program_inspects_like_the_directory(source: Path, tmp_path: Path) -> None:
    pyz = tmp_path / "sparsecopy.pyz"
    zipapp.create_archive(PROGRAM, pyz)
    with attached(source) as src:
        from_zip = sparsecopy("inspect", src, program=pyz)
        from_dir = sparsecopy("inspect", src)
    assert from_zip.returncode == 0, from_zip.stderr
    assert from_zip.summary == from_dir.summary
    assert [p["fs"] for p in from_zip.summary["partitions"]] == ["unknown", "vfat", "ext4"]


@pytest.fixture
def by_id(tmp_path: Path) -> Path:
    directory = tmp_path / "by-id"
    directory.mkdir()
    return directory


def test_device_found_by_nvme_symlink(by_id: Path, source: Path) -> None:
    with attached(source) as device:
        (by_id / f"nvme-Amazon_Elastic_Block_Store_{VOLUME.replace('-', '')}").symlink_to(device)
        run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == device


def test_device_refuses_a_mounted_volume(by_id: Path, tmp_path: Path) -> None:
    bare = images.build_bare_ext4(tmp_path / "bare.img")
    with attached(bare.path) as device, images.mounted(device, "ext4"):
        (by_id / f"nvme-Amazon_Elastic_Block_Store_{VOLUME.replace('-', '')}").symlink_to(device)
        run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    _assert_one_error_line(run, "is mounted")


def test_device_refuses_a_volume_whose_partition_is_mounted(by_id: Path, tmp_path: Path) -> None:
    """No partition scanning: the partition is an offset loop device over the volume's device,
    and a mount there uses the volume (the twin's instance booted from the user's disk)."""
    disk = images.build_gpt_efi_ext4(tmp_path / "gpt.img")
    root = disk.partition(3)
    link = by_id / f"nvme-Amazon_Elastic_Block_Store_{VOLUME.replace('-', '')}"
    with (
        attached(disk.path) as device,
        images.loop_device(device, root.start, root.size) as partition,
        images.mounted(partition, "ext4", "ro,noload"),
    ):
        link.symlink_to(device)
        run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    _assert_one_error_line(run, "is mounted")
    # the same stacked loop, not mounted: the volume is free
    with attached(disk.path) as device, images.loop_device(device, root.start, root.size):
        link.unlink()
        link.symlink_to(device)
        run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    assert run.returncode == 0, run.stderr


def test_device_refuses_the_root_disk(by_id: Path) -> None:
    root = os.stat("/").st_dev
    node = f"/sys/dev/block/{os.major(root)}:{os.minor(root)}"
    name = Path(os.path.realpath(node)).name
    if not Path(f"/dev/{name}").exists():
        pytest.skip("the root filesystem is not on a block device here")
    (by_id / f"nvme-Amazon_Elastic_Block_Store_{VOLUME.replace('-', '')}").symlink_to(
        f"/dev/{name}"
    )
    run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    _assert_one_error_line(run, "root disk")


def test_device_xen_name_fallback(by_id: Path, source: Path) -> None:
    """No NVMe device: /dev/sdX is looked up as /dev/xvdX (a node made for the test)."""
    with attached(source) as device:
        rdev = os.stat(device).st_rdev
        for letters in ("zq", "zr", "zs", "zt", "zu", "zv", "zw", "zx"):
            node = Path(f"/dev/xvd{letters}")
            try:  # atomic: a concurrent test run picks another name
                os.mknod(node, stat.S_IFBLK | 0o600, rdev)
                break
            except FileExistsError:
                continue
        else:
            pytest.fail("no free /dev/xvdz? name for the test node")
        try:
            run = sparsecopy(
                "device",
                VOLUME,
                "--device-name",
                f"/dev/sd{letters}",
                env={"SPARSECOPY_BY_ID_DIR": str(by_id)},
            )
        finally:
            node.unlink()
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(node)


def test_device_missing_volume_names_it(by_id: Path) -> None:
    run = sparsecopy("device", VOLUME, env={"SPARSECOPY_BY_ID_DIR": str(by_id)})
    _assert_one_error_line(run, f"volume {VOLUME} is not attached")


def test_device_rejects_a_malformed_volume_id() -> None:
    run = sparsecopy("device", "vol-xyz")
    _assert_one_error_line(run, "is not an EBS volume id")


def test_bad_jobs_value_is_refused(source: Path, tmp_path: Path) -> None:
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--jobs", "0")
    _assert_one_error_line(run, "--jobs 0 is out of range")


def test_program_runs_without_the_venv(source: Path) -> None:
    """The instance has no venv: python3 with -I (isolated, no site-packages) must do."""
    with attached(source) as src:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", str(PROGRAM), "inspect", src],
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr


def test_btrfs_without_scratch_room_is_copied_raw(tmp_path: Path) -> None:
    """--method allocated never fails for lack of scratch space: btrfs falls back to raw."""
    disk = images.build_btrfs(tmp_path / "btrfs.img")
    target = blank_like(disk.path, tmp_path / "target.img")
    with (
        _tiny_tmpfs(tmp_path) as scratch,
        attached(disk.path) as src,
        attached(target) as dst,
    ):
        run = sparsecopy("copy", src, dst, "--verify", "--scratch", str(scratch))
    assert run.returncode == 0, run.stderr
    (part,) = run.summary["partitions"]
    assert (part["fs"], part["method"]) == ("btrfs", "raw")
    assert "too little to trim" in part["note"]
    copy = images.DiskImage(target, disk.size, disk.table, disk.partitions)
    assert images.file_hashes(copy, 1) == disk.files[1]


def test_progress_goes_to_stderr_and_only_the_summary_to_stdout(
    source: Path, tmp_path: Path
) -> None:
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst)
    assert run.returncode == 0, run.stderr
    assert set(run.summary) >= {
        "source_bytes_read",
        "target_bytes_written",
        "partitions",
        "verified",
        "seconds",
    }
    assert run.summary["verified"] is False  # not asked to verify
    final = [line for line in run.stderr.splitlines() if "copy: 100.0%" in line]
    assert final, run.stderr
    assert "/s, ETA " in final[-1] and " of " in final[-1]
