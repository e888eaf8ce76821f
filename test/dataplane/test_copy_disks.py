"""Copy real disk images (loop devices) with both methods and check the target file by file.

For every image: each file's SHA-256 on the target equals the source's view after its own
recovery (a copy of the source whose filesystems were mounted read-write), each target
filesystem checks clean with its own checker, the partition table and everything outside the
partitions is byte-identical, the summary counts the 512 KiB blocks written and the all-zero
ones among them, and the target holds no more 512 KiB chunks of data than the seed method (dd,
mount with discard, fstrim, sparse copy) produces from the same image.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy, working_copy

from devkit import disks

pytestmark = pytest.mark.needs_root

BUILDERS: dict[str, Callable[[Path], disks.DiskImage]] = {
    "gpt-bios-efi-ext4": disks.build_gpt_efi_ext4,
    "gpt-xfs": disks.build_gpt_xfs,
    "gpt-xfs-crashed": functools.partial(disks.build_gpt_xfs, crash=True),
    "mbr-two-ntfs": disks.build_mbr_ntfs,
    "mbr-logical-ext4": disks.build_mbr_logical,
    "bare-ext4": disks.build_bare_ext4,
    "bare-ext4-crashed": functools.partial(disks.build_bare_ext4, crash=True),
    "ext4-swap": disks.build_ext4_swap,
    "btrfs": disks.build_btrfs,
    "empty": disks.build_empty,
    "random-bytes": disks.build_random_partition,
}

FILESYSTEMS = ("ext4", "xfs", "btrfs", "ntfs", "vfat")
EXPECTED_FS = {"none": "unknown", "empty": "unknown"}


@dataclass
class Case:
    name: str
    source: disks.DiskImage  # pristine: never copied from, so every test starts dirty
    reference: disks.DiskImage  # the source after its own recovery
    reference_hashes: dict[int, dict[str, str]]
    seed_chunks: int  # written chunks of the seed method on the same image


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    work = tmp_path_factory.mktemp(request.param)
    source = BUILDERS[request.param](work / "source.img")
    reference = disks.recovered_copy(source, work / "reference.img")
    hashes = {
        p.number: disks.file_hashes(reference, p.number)
        for p in reference.partitions
        if p.fs in FILESYSTEMS
    }
    seed = disks.seed_method_image(source, work / "seed.img")
    seed_chunks = len(disks.nonzero_chunks(seed))
    seed.unlink()
    return Case(request.param, source, reference, hashes, seed_chunks)


def _copy(case: Case, tmp_path: Path, method: str) -> tuple[dict, disks.DiskImage]:
    source = working_copy(case.source, tmp_path / "source.img")
    target_path = blank_like(source.path, tmp_path / "target.img")
    with attached(source.path) as src, attached(target_path) as dst:
        run = sparsecopy(
            "copy",
            src,
            dst,
            "--method",
            method,
            "--verify",
            "--jobs",
            "8",
            "--scratch",
            str(tmp_path),
        )
    assert run.returncode == 0, run.stderr
    target = source.copy_at(target_path)
    return run.summary, target


@pytest.mark.parametrize("method", ["allocated", "trim"])
def test_copy(case: Case, tmp_path: Path, method: str, no_leaks: None) -> None:
    summary, target = _copy(case, tmp_path, method)
    assert summary["verified"] is True

    # The plan names every partition where the builder put it, with the right filesystem.
    copied = [p for p in case.source.partitions if p.fs != "extended"]
    assert [(p["number"], p["start"], p["size"]) for p in summary["partitions"]] == [
        (p.number, p.start, p.size) for p in copied
    ]
    assert [p["fs"] for p in summary["partitions"]] == [EXPECTED_FS.get(p.fs, p.fs) for p in copied]

    # Partition table, GPT backup, EBRs and boot-loader gaps: byte for byte.
    if case.source.table != "none":
        assert disks.partition_table(target.path) == disks.partition_table(case.source.path)
    covered = sorted((p.start, p.start + p.size) for p in copied)
    pos = 0
    for start, end in [*covered, (case.source.size, case.source.size)]:
        if start > pos:
            assert disks.same_bytes(case.reference.path, target.path, pos, start - pos)
        pos = max(pos, end)

    for part in copied:
        if part.fs in FILESYSTEMS:
            got = disks.file_hashes(target, part.number)
            assert got == case.reference_hashes[part.number], f"partition {part.number}"
            # The files the builder wrote (and fsync'ed, also before a crash) are all there.
            for path, digest in case.source.files.get(part.number, {}).items():
                assert got.get(path) == digest, f"partition {part.number}: {path}"
            disks.fsck_clean(target, part.number)
        elif part.fs == "none":
            assert disks.same_bytes(case.source.path, target.path, part.start, part.size)
        elif part.fs == "swap":
            page = 4096
            assert disks.same_bytes(case.source.path, target.path, part.start, page)
            stale = [
                c
                for c in disks.data_chunks(target.path)
                if part.start + page <= c * disks.CHUNK
                and (c + 1) * disks.CHUNK <= part.start + part.size
            ]
            assert not stale, "stale swap pages were copied"

    # Every block of the set is written, zeros included (issue 19); the data in it is no more
    # than the seed method keeps.
    chunks = disks.written_chunks(target.path)
    data = len(disks.nonzero_chunks(target.path))
    assert summary["blocks_written"] == chunks
    assert summary["zero_blocks"] == chunks - data
    assert data <= case.seed_chunks, (
        f"{method} wrote {data} chunks of data, the seed method {case.seed_chunks}"
    )
    mapped = [p for p in copied if p.fs in ("ext4", "xfs", "ntfs")]
    if method == "allocated" and mapped and "crashed" not in case.name:
        # The filesystems' maps were used: far less than the whole volume was read.
        assert {
            p["method"] for p in summary["partitions"] if p["fs"] in ("ext4", "xfs", "ntfs")
        } == {"allocated"}
        assert summary["source_bytes_read"] < case.source.size // 2
    if case.name == "empty":
        # unknown content and no block list: every block is needed, zeros included
        assert chunks == summary["zero_blocks"] == case.source.size // disks.CHUNK
        assert summary["target_bytes_written"] == case.source.size


def test_gpt_on_a_4k_sector_disk(tmp_path: Path) -> None:
    """Disks with 4096-byte logical sectors: GPT header at byte 4096, LBAs of 4 KiB."""
    size = 96 * disks.MIB
    source_path, target_path = tmp_path / "source.img", tmp_path / "target.img"
    disks.create_sparse(source_path, size)
    with disks.loop_device(source_path, sector_size=4096) as device:
        disks.run("sgdisk", "--clear", "--new=1:256:+64M", "--typecode=1:8300", device)
    source = disks.DiskImage(
        source_path, size, "gpt", [disks.Partition(1, disks.MIB, 64 * disks.MIB, "ext4")]
    )
    disks.mkfs(source, 1)
    with disks.partition_mount(source, 1) as mnt:
        source.files[1] = disks.fill_dirty(
            mnt, seed=12, files=4, file_size=4 * disks.MIB, delete=(1, 3)
        )
    disks.create_sparse(target_path, size)
    with (
        disks.loop_device(source_path, sector_size=4096) as src,
        disks.loop_device(target_path, sector_size=4096) as dst,
    ):
        run = sparsecopy("copy", src, dst, "--verify")
        assert run.returncode == 0, run.stderr
        tables = [disks.run("sfdisk", "--dump", dev).replace(dev, "DISK") for dev in (src, dst)]
    assert tables[0] == tables[1]
    (part,) = run.summary["partitions"]
    assert (part["start"], part["size"], part["method"]) == (
        disks.MIB,
        64 * disks.MIB,
        "allocated",
    )
    target = disks.DiskImage(target_path, size, "gpt", source.partitions)
    assert disks.file_hashes(target, 1) == source.files[1]
    for start, end in ((0, disks.MIB), (65 * disks.MIB, size)):  # both GPT copies
        assert disks.same_bytes(source_path, target_path, start, end - start)
