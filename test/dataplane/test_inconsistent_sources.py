"""Sources whose free-space map calls free a block a file still uses, on a filesystem that says
it is clean (issue #23; the ext2/3/4 cases come from e2fsprogs' corpus, test_e2fs_corpus.py).
Damaged here by hand: an XFS whose free-space btree (bnobt) lists a file's extent as free, and an
NTFS whose $Bitmap has the bits of a file's clusters cleared. Each copy must keep the file's
bytes, copy the partition raw and say the source is inconsistent; the undamaged image is copied
by its map."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy

from devkit import disks
from devkit.mounts import mounted
from devkit.pytest_ci import needs_tools

pytestmark = pytest.mark.needs_root

MIB = 1024 * 1024
VICTIM = 8 * MIB


def _victim(size: int = VICTIM) -> bytes:
    return hashlib.shake_256(b"issue 23 victim").digest(size)


def _with_victim(image: Path, fstype: str) -> None:
    with disks.loop_device(image) as device, mounted(device, fstype) as mnt:
        (mnt / "victim").write_bytes(_victim())


def _copy(source: Path, tmp_path: Path) -> dict:
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--verify")
    assert run.returncode == 0, run.stderr
    return run.summary


def _keeps_victim(summary: dict, source: Path, tmp_path: Path) -> None:
    """The victim's bytes are where the source has them, in the copy too."""
    data = source.read_bytes()
    at = data.find(_victim(4096))
    assert at >= 0
    copied = (tmp_path / "target.img").read_bytes()
    assert copied[at : at + VICTIM] == data[at : at + VICTIM] == _victim()


def _said_inconsistent(summary: dict, judge: str, finding: str, fsck: str) -> None:
    assert summary["sourceConsistent"] is False
    (part,) = summary["partitions"]
    assert part["method"] == "raw" and part["consistent"] is False
    assert part["note"].startswith(f"source filesystem inconsistent, {judge} found: ")
    assert finding in part["note"]
    assert part["note"].endswith("check and repair the source filesystem (fsck)")
    # verify compares the copy's check with the source's (xfs_repair: the same findings on both;
    # ntfsfix does not look at $Bitmap)
    assert part["fsck"].startswith(fsck), part["fsck"]


def _xfs_free_the_victim(image: Path) -> None:
    """Widen the bnobt's last record of AG 0 down to the victim's first block, as bit rot in
    the btree would (xfs_db recomputes the block's CRC, so only a cross-check can tell)."""
    # the first file of a fresh filesystem is inode 131 (the root directory's chunk)
    assert "core.size = 8388608" in disks.run(
        "xfs_db", "-r", "-c", "inode 131", "-c", "p core.size", str(image)
    )
    bmap = disks.run("xfs_db", "-r", "-c", "inode 131", "-c", "bmap", str(image))
    start, count = map(int, re.search(r"startblock (\d+) \(0/\d+\) count (\d+)", bmap).groups())  # type: ignore[union-attr]
    recs = disks.run(
        "xfs_db", "-r", "-c", "agf 0", "-c", "addr bnoroot", "-c", "p recs", str(image)
    )
    last = max(map(int, re.findall(r"^(\d+):\[", recs, re.M)))
    first, length = map(int, re.search(rf"^{last}:\[(\d+),(\d+)\]", recs, re.M).groups())  # type: ignore[union-attr]
    assert first >= start + count, "the victim must lie before the last free extent"
    disks.run(
        "xfs_db", "-x", "-c", "agf 0", "-c", "addr bnoroot",
        "-c", f"write recs[{last}].startblock {start}",
        "-c", f"write recs[{last}].blockcount {first + length - start}",
        str(image),
    )  # fmt: skip
    freesp = disks.run("xfs_db", "-r", "-c", "freesp -d", str(image))
    assert re.search(rf"^\s+0\s+{start}\s+\d+$", freesp, re.M), "the map must call it free"


@needs_tools("xfs_db")
def test_xfs_whose_free_space_btree_frees_a_file(tmp_path: Path) -> None:
    image = tmp_path / "xfs.img"
    disks.create_sparse(image, 300 * MIB)
    disks.run("mkfs.xfs", "-q", str(image))
    _with_victim(image, "xfs")
    intact = _copy(image, tmp_path)
    assert intact["sourceConsistent"] is True
    assert intact["partitions"][0]["method"] == "allocated"
    (tmp_path / "target.img").unlink()
    _xfs_free_the_victim(image)
    damaged = _copy(image, tmp_path)
    _said_inconsistent(damaged, "xfs_repair", "claims free block", "as the source: ")
    _keeps_victim(damaged, image, tmp_path)


def _ntfs_clear_victim_bits(image: Path) -> None:
    """Clear the $Bitmap bits of the victim's clusters (found by its content)."""
    data = bytearray(image.read_bytes())
    boot = bytes(data[:512])
    sector, per_cluster = struct.unpack_from("<HB", boot, 11)
    cluster = sector * per_cluster
    first = data.find(_victim(4096)) // cluster
    assert first > 0 and data.find(_victim(4096)) % cluster == 0
    # $Bitmap's data: MFT record 6's unnamed $DATA, non-resident, one run (a fresh volume)
    mft_lcn = struct.unpack_from("<Q", boot, 48)[0]
    per_record = struct.unpack_from("<b", boot, 64)[0]
    record_size = cluster * per_record if per_record > 0 else 1 << -per_record
    at = mft_lcn * cluster + 6 * record_size
    record = data[at : at + record_size]
    pos = struct.unpack_from("<H", record, 20)[0]
    while struct.unpack_from("<I", record, pos)[0] != 0x80:
        pos += struct.unpack_from("<I", record, pos + 4)[0]
    runs = pos + struct.unpack_from("<H", record, pos + 32)[0]
    header = record[runs]
    len_size, off_size = header & 0x0F, header >> 4
    lcn = int.from_bytes(record[runs + 1 + len_size : runs + 1 + len_size + off_size], "little")
    bitmap = lcn * cluster
    for number in range(first, first + VICTIM // cluster):
        data[bitmap + number // 8] &= ~(1 << (number % 8)) & 0xFF
    image.write_bytes(bytes(data))


@needs_tools("mkntfs")
def test_ntfs_whose_bitmap_frees_a_file(tmp_path: Path) -> None:
    image = tmp_path / "ntfs.img"
    disks.create_sparse(image, 200 * MIB)
    with disks.loop_device(image) as device:
        disks.run("mkntfs", "-q", "-F", "-f", "--sector-size", "512", device)
    _with_victim(image, "ntfs")
    intact = _copy(image, tmp_path)
    assert intact["sourceConsistent"] is True
    assert intact["partitions"][0]["method"] == "allocated"
    (tmp_path / "target.img").unlink()
    _ntfs_clear_victim_bits(image)
    damaged = _copy(image, tmp_path)
    _said_inconsistent(
        damaged, "the MFT's runlists", f"{VICTIM} bytes in use that $Bitmap calls free", "clean"
    )
    _keeps_victim(damaged, image, tmp_path)


def _ext4_image(path: Path) -> Path:
    disks.create_sparse(path, 16 * MIB)
    disks.run("mkfs.ext4", "-q", "-F", "-O", "^metadata_csum", str(path))
    return path


def _root_inode_broken(path: Path) -> None:
    """Zero the root directory's inode (inode 2 of the first inode table) in place."""
    header = disks.run("dumpe2fs", "-h", str(path))
    block, inode = (
        int(re.search(rf"^{name}:\s+(\d+)$", header, re.M).group(1))  # type: ignore[union-attr]
        for name in ("Block size", "Inode size")
    )
    table = re.search(r"Inode table at (\d+)", disks.run("dumpe2fs", str(path)))
    assert table
    with open(path, "r+b") as f:
        f.seek(int(table.group(1)) * block + inode)
        f.write(bytes(inode))


def test_verify_fails_only_on_what_the_source_does_not_have(tmp_path: Path) -> None:
    """verify compares the copy's check with the source's: a copy that is worse fails with the
    checker's own findings (not its banner); a copy exactly as inconsistent as its source is
    reported as such."""
    from sparsecopy import plan as planning
    from sparsecopy.errors import Failure
    from sparsecopy.partitions import Partition
    from sparsecopy.verify import fsck_partition

    source = _ext4_image(tmp_path / "source.img")
    target = tmp_path / "target.img"
    target.write_bytes(source.read_bytes())
    _root_inode_broken(target)
    size = source.stat().st_size
    part = planning.PartPlan(Partition(1, 0, size, ""), "ext4")
    with pytest.raises(Failure) as failed:
        fsck_partition(str(source), str(target), size, part)
    message = str(failed.value)
    assert message.startswith(
        "verify: e2fsck finds on target partition 1 (ext4) what it does not find on the source: "
    )
    assert "Root inode is not a directory" in message or "Root inode not allocated" in message
    # the same damage on the source: the copy is no worse, and says so
    _root_inode_broken(source)
    judged = planning.PartPlan(Partition(1, 0, size, ""), "ext4")
    assert not judged.judged(str(source))
    outcome = fsck_partition(str(source), str(target), size, judged)
    assert outcome.startswith("as the source: e2fsck finds the same ")
    assert outcome.endswith("check and repair the source filesystem (fsck)")
