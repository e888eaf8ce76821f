"""The command line contract: errors, failure marking, inspect, the zipped program, device."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
import zipapp
from collections.abc import Iterator
from pathlib import Path

import images
import pytest
from conftest import PROGRAM, Run, attached, blank_like, sparsecopy
from sparsecopy import summary

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
    images.run("cp", "--sparse=always", str(disk.path), str(path))
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


# --- summarize: the Command document's bounded standard output line ---------------------------


def _copy_summary(digit: int, partitions: int, note: str) -> dict:
    parts = [
        {
            "number": n + 1,
            "start": (n + 1) << 20,
            "size": 1 << 30,
            "fs": "ntfs",
            "method": ("raw", "allocated", "header", "odd")[n % 4],
            "allocated_bytes": 1 << 30,
            "fsck": "clean" if n % 2 else "not checked: ntfs has no checker",
            **({"note": f"{n + 1}: {note}"} if note else {}),
        }
        for n in range(partitions)
    ]
    return {
        "source_bytes_read": 1000 * digit + 7,
        "target_bytes_written": 42 * digit,
        "partitions": parts,
        "verified": True,
        "seconds": 12.3456,
        "table": "gpt",
        "outside_partitions_bytes": 1048576,
    }


def _summarize_files(tmp_path: Path, outputs: list[str], count: int | None = None) -> Run:
    files = []
    for i, text in enumerate(outputs):
        files.append(tmp_path / f"stdout.{i}")
        files[-1].write_text(text)
    n = len(outputs) if count is None else count
    return sparsecopy(
        "summarize",
        "--source-volume-ids",
        ",".join(f"vol-{i:017x}" for i in range(n)),
        "--target-volume-ids",
        ",".join(f"vol-{i + 0x100:017x}" for i in range(n)),
        *map(str, files),
    )


def test_summarize_10_volumes_of_128_partitions_with_long_notes_stays_under_24000(
    tmp_path: Path,
) -> None:
    # notes with quotes, control characters and astral characters: 12 JSON characters each
    note = 'dirty "NTFS"\t\U0001f4be volume, copied raw ' * 200
    outputs = [
        "a progress line\n" + json.dumps(_copy_summary(i, 128, note)) + "\n" for i in range(10)
    ]
    run = _summarize_files(tmp_path, outputs)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("\n") == 1
    assert len(run.stdout) - 1 <= summary.LINE_BOUND < summary.STDOUT_LIMIT
    assert run.stdout.isascii()
    volumes = run.summary["volumes"]
    assert len(volumes) == 10
    for i, volume in enumerate(volumes):
        assert len(summary.dumps(volume)) <= summary.VOLUME_BUDGET
        # what report/build.py reads, by the pair's source volume id
        assert volume["sourceVolumeId"] == f"vol-{i:017x}"
        assert volume["targetVolumeId"] == f"vol-{i + 0x100:017x}"
        assert volume["source_bytes_read"] == 1000 * i + 7
        assert volume["target_bytes_written"] == 42 * i
        assert volume["partition_count"] == 128
        assert volume["methods"] == {"allocated": 32, "header": 32, "other": 32, "raw": 32}
        assert volume["fsck"] == {"clean": 64, "not_checked": 64}
        assert volume["note_count"] == 128
        assert volume["seconds"] == 12.346 and volume["verified"] is True
        assert 0 < len(volume["notes"]) < 128  # as many as fit, in partition order
        for n, text in enumerate(volume["notes"]):
            assert text.startswith(f"partition {n + 1} (ntfs, ")
            assert text.endswith("...")
            assert len(json.dumps(text)) - 2 <= summary.NOTE_BUDGET
    # every partition's full details, notes uncut, are on stderr
    for i in range(10):
        head = f"summary of volume {i + 1}/10 vol-{i:017x} -> vol-{i + 0x100:017x}"
        assert f"{head} partition 128: " in run.stderr
        assert json.dumps(f"128: {note}") in run.stderr


def test_summarize_fixed_fields_fit_the_volume_budget_at_their_largest() -> None:
    """Everything but the notes is bounded by construction; the notes fill what is left."""
    huge = 2**63 - 1
    worst = {
        "source_bytes_read": huge,
        "target_bytes_written": huge,
        "outside_partitions_bytes": huge,
        "held_blocks": huge,
        "held_blocks_read": huge,
        "verified": True,
        "seconds": 999_999_999.999,
        "table": "x" * 10_000,
        "partitions": [
            {"method": m, "fsck": f, "note": "n" * 5000}
            for m in ("allocated", "trim", "raw", "header", "odd" * 1000)
            for f in ("clean", "not checked: " + "y" * 1000)
        ]
        * 100,
    }
    long_id = "vol-" + "f" * 10_000
    without_notes = summary.volume_entry(long_id, long_id, {**worst, "partitions": []})
    assert len(summary.dumps(without_notes)) < summary.VOLUME_BUDGET // 2
    entry = summary.volume_entry(long_id, long_id, worst)
    assert len(summary.dumps(entry)) > summary.VOLUME_BUDGET - summary.NOTE_BUDGET - 3
    assert len(summary.dumps(entry)) <= summary.VOLUME_BUDGET
    assert entry["partition_count"] == 1000 and entry["note_count"] == 1000
    # values that are not what sparsecopy prints are dropped, not passed through at any length
    odd = summary.volume_entry(
        "vol-1", "vol-2", {"source_bytes_read": "9" * 5000, "seconds": 1e300}
    )
    assert odd["source_bytes_read"] is None and odd["seconds"] is None
    assert summary.MAX_VOLUMES * summary.VOLUME_BUDGET + 23 == summary.LINE_BOUND < 24_000


def test_summarize_clip_counts_json_escaped_characters() -> None:
    assert summary.clip("short", 10) == "short"
    for text in ('"\\' * 50, "\x00" * 50, "\U0001f4be" * 50, "é" * 50):
        clipped = summary.clip(text, 40)
        assert clipped.endswith("...")
        assert 40 - 12 < len(json.dumps(clipped)) - 2 <= 40
    line = summary.error_line("e\u2028" * 100_000, "vol-" + "0" * 1000)
    assert len(line) <= summary.ERROR_LINE_BOUND
    assert json.loads(line)["error"].endswith("...")


def test_summarize_a_copy_without_a_json_summary_is_an_error_line_for_its_volume(
    tmp_path: Path,
) -> None:
    good = json.dumps(_copy_summary(1, 2, ""))
    run = _summarize_files(tmp_path, [good, "done\n" + "x" * 100_000])
    assert run.returncode == 1
    (line,) = run.stdout.splitlines()
    assert len(line) <= summary.ERROR_LINE_BOUND
    report = json.loads(line)
    assert report["sourceVolumeId"] == f"vol-{1:017x}"
    assert report["error"].startswith("sparsecopy copy printed no JSON summary")
    assert run.error_line.startswith("sparsecopy: error: sparsecopy copy printed no JSON")


def test_summarize_refuses_more_volumes_than_a_job_has(tmp_path: Path) -> None:
    good = json.dumps(_copy_summary(1, 2, ""))
    run = _summarize_files(tmp_path, [good] * 11)
    assert run.returncode == 1
    assert "a job has 1 to 10" in json.loads(run.stdout)["error"]
    mismatch = _summarize_files(tmp_path, [good] * 2, count=3)
    assert mismatch.returncode == 1
    assert "they must match" in json.loads(mismatch.stdout)["error"]


def test_summarize_of_a_real_copy_keeps_what_the_report_reads(source: Path, tmp_path: Path) -> None:
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        copied = sparsecopy("copy", src, dst, "--verify")
    assert copied.returncode == 0, copied.stderr
    run = _summarize_files(tmp_path, [copied.stdout])
    assert run.returncode == 0, run.stderr
    (volume,) = run.summary["volumes"]
    full = copied.summary
    for key in ("source_bytes_read", "target_bytes_written", "outside_partitions_bytes", "table"):
        assert volume[key] == full[key]
    assert volume["verified"] is True
    assert volume["partition_count"] == len(full["partitions"]) == 3
    assert sum(volume["methods"].values()) == 3
