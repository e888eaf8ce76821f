"""Unit tests of the program's pure parts (no root needed)."""

from __future__ import annotations

import ast
import os
import random
import struct
from pathlib import Path

import pytest
from conftest import PROGRAM
from sparsecopy import (
    bitmap,
    blockdev,
    blocks,
    consistency,
    copier,
    extents,
    fs_fat,
    fs_ntfs,
    partitions,
    plan,
    probe,
    progress,
    source_blocks,
    volume_sink,
)

from devkit import chunks
from devkit import disks as images


def _reader(path: Path, base: int = 0):
    data = path.read_bytes()
    return lambda offset, length: data[base + offset : base + offset + length]


# ---------------------------------------------------------------- Python 3.9


@pytest.mark.parametrize("module", sorted(p.name for p in PROGRAM.glob("*.py")))
def test_module_parses_with_the_python_39_grammar(module: str) -> None:
    """AL2023 runs python3.9: no match statements, parenthesised with-items, etc."""
    ast.parse((PROGRAM / module).read_text(), filename=module, feature_version=(3, 9))


def test_modules_postpone_no_runtime_union_syntax() -> None:
    """`X | Y` outside annotations fails on 3.9 at runtime; annotations are not evaluated only
    with `from __future__ import annotations`, so the package does not use the syntax at all."""
    for path in PROGRAM.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
                names = (node.left, node.right)
                assert not any(isinstance(n, ast.Constant) and n.value is None for n in names), (
                    f"{path.name}:{node.lineno} uses X | None"
                )


# ---------------------------------------------------------------- extents


def test_extents_normalize_merges_overlaps_and_touching() -> None:
    assert extents.normalize([(10, 5), (0, 4), (4, 2), (20, 0), (12, 10)]) == [(0, 6), (10, 12)]


def test_extents_complement_and_clip() -> None:
    assert extents.complement([(10, 10), (30, 5)], 0, 40) == [(0, 10), (20, 10), (35, 5)]
    assert extents.complement([], 5, 9) == [(5, 4)]
    assert extents.clip([(0, 10), (20, 10)], 5, 25) == [(5, 5), (20, 5)]


def test_extents_align_widens_within_limit() -> None:
    assert extents.align([(513, 10), (1100, 1)], 512, 1536) == [(512, 1024)]
    assert extents.align([(1000, 600)], 512, 1500) == [(512, 988)]


def test_extents_split_cuts_on_absolute_boundaries() -> None:
    assert extents.split([(100, 300)], 128) == [(100, 28), (128, 128), (256, 128), (384, 16)]


# ---------------------------------------------------------------- plan → blocks → sink

BLOCK = source_blocks.BLOCK_SIZE


def test_touched_blocks_carry_the_parts_of_the_ranges_in_each_block() -> None:
    ranges = [(0, 4096), (8192, 512), (BLOCK - 512, 1024), (3 * BLOCK, 2 * BLOCK + 512)]
    found = list(blocks.touched_blocks(ranges))
    assert [(b.number, b.parts) for b in found] == [
        (0, ((0, 4096), (8192, 8704), (BLOCK - 512, BLOCK))),
        (1, ((0, 512),)),
        (3, ((0, BLOCK),)),
        (4, ((0, BLOCK),)),
        (5, ((0, 512),)),
    ]
    assert sum(b.weight for b in found) == sum(n for _, n in ranges)


def _plan(
    parts: list[tuple[str, list[tuple[int, int]]]], outside: list[tuple[int, int]]
) -> plan.DiskPlan:
    layout = partitions.Layout("gpt", [], "")
    plans = []
    for number, (method, extents_) in enumerate(parts, start=1):
        part = plan.PartPlan(partitions.Partition(number, extents_[0][0], 8 * BLOCK, ""), "ext4")
        part.use(method, extents_)
        plans.append(part)
    return plan.DiskPlan(layout, plans, outside)


def test_the_block_set_is_every_block_the_plan_touches_trim_only_for_the_dry_run() -> None:
    disk = _plan(
        [
            ("allocated", [(2 * BLOCK + 512, 1024), (5 * BLOCK, BLOCK + 1)]),
            ("trim", [(9 * BLOCK, 3 * BLOCK)]),
        ],
        [(0, 4096)],
    )
    chosen = blocks.BlockSet.of(disk, 512, 16 * BLOCK)
    assert [b.number for b in chosen.blocks()] == [0, 2, 5, 6]
    assert chosen.block_count == 4
    assert chosen.weight == 4096 + 1024 + BLOCK + 512  # sector-aligned
    assert [b.number for b in chosen.blocks(first=BLOCK)] == [2, 5, 6]
    assert [b.number for b in chosen.blocks(end=3 * BLOCK)] == [0, 2]
    dry = blocks.BlockSet.of(disk, 512, 16 * BLOCK, with_trim=True)
    assert dry.block_count == 7


def test_source_blocks_are_masked_padded_and_only_their_parts_read(tmp_path: Path) -> None:
    path = tmp_path / "disk.img"
    path.write_bytes(b"\x01" * BLOCK + b"\x02" * 4096)  # the last block ends 4 KiB in
    fd = os.open(path, 0)
    try:
        source = blocks.Source(fd, BLOCK + 4096, None)
        parts = ((512, 1024), (200_000, 200_512))  # far apart: two reads, the gap masked
        first = source.read(blocks.Block(0, 0, parts))
        last = source.read(blocks.Block(1, 0, ((0, 4096),)))
        whole = source.read(blocks.Block(0, 0, blocks.FULL))
        near = source.read(blocks.Block(0, 0, ((0, 512), (4096, 4608))))  # one merged read
        assert first == (
            bytes(512)
            + b"\x01" * 512
            + bytes(200_000 - 1024)
            + b"\x01" * 512
            + bytes(BLOCK - 200_512)
        )
        assert last == b"\x02" * 4096 + bytes(BLOCK - 4096)
        assert whole == b"\x01" * BLOCK
        assert near == b"\x01" * 512 + bytes(3584) + b"\x01" * 512 + bytes(BLOCK - 4608)
        assert source.bytes_read == 1024 + 4096 + BLOCK + 4608
        source.read(blocks.Block(0, 0, blocks.FULL), count=False)
        assert source.bytes_read == 1024 + 4096 + BLOCK + 4608
    finally:
        os.close(fd)


def test_the_volume_sink_writes_whole_masked_blocks_zeros_included(tmp_path: Path) -> None:
    """Every block of the set is written (allocated on the sparse target, as on EBS), an
    all-zero one too; bytes outside the parts are zero; keep_out is never written."""
    size = 4 * BLOCK
    source, target = tmp_path / "source.bin", tmp_path / "target.bin"
    data = bytearray(random.Random(3).randbytes(size))
    data[BLOCK : 2 * BLOCK] = bytes(BLOCK)  # a needed block of zeros
    source.write_bytes(bytes(data))
    images.create_sparse(target, size)
    with open(target, "r+b") as f:
        f.seek(3 * BLOCK)
        f.write(b"\xee" * 4096)  # a trim partition's bytes in block 3
    chosen = [
        blocks.Block(0, 0, ((0, 4096),)),
        blocks.Block(1, 0, blocks.FULL),
        blocks.Block(3, 0, ((8192, 12288),)),
    ]
    src = copier.open_device(str(source), write=False)
    dst = copier.open_device(str(target), write=True)
    try:
        sink = volume_sink.VolumeSink(blocks.Source(src, size, None), dst, 2, [(3 * BLOCK, 4096)])
        sink.write(chosen, progress.Progress("test", 1))
        sink.compare(dst, chosen, progress.Progress("verify", 1))
    finally:
        os.close(src)
        os.close(dst)
    result = target.read_bytes()
    assert result[:4096] == data[:4096] and result[4096:BLOCK] == bytes(BLOCK - 4096)
    assert result[BLOCK : 2 * BLOCK] == bytes(BLOCK)
    assert result[3 * BLOCK : 3 * BLOCK + 4096] == b"\xee" * 4096
    assert (
        result[3 * BLOCK + 8192 : 3 * BLOCK + 12288] == data[3 * BLOCK + 8192 : 3 * BLOCK + 12288]
    )
    assert chunks.written_chunks(target) == {0, 1, 3}
    assert (sink.blocks_written, sink.zero_blocks) == (3, 1)
    assert sink.bytes_written == 3 * BLOCK - 4096


# ---------------------------------------------------------------- bitmaps and NTFS runs


def test_set_bit_runs() -> None:
    assert bitmap.set_bit_runs(b"\x00\xff\x01\x80", 32) == [(8, 9), (31, 1)]
    assert bitmap.set_bit_runs(b"\xff\xff", 12) == [(0, 12)]
    assert bitmap.set_bit_runs(b"\x05", 8) == [(0, 1), (2, 1)]


def test_ntfs_runlist_decoding() -> None:
    # 0x21: 1-byte length, 2-byte offset; second run relative, negative; third sparse
    data = bytes([0x21, 0x10, 0x00, 0x01, 0x11, 0x08, 0xF0, 0x01, 0x04, 0x00])
    assert fs_ntfs.decode_runs(data) == [(0, 16, 256), (16, 8, 240), (24, 4, None)]


# ---------------------------------------------------------------- tables and probing


def test_gpt_layout_matches_sfdisk(tmp_path: Path) -> None:
    disk = images.make_gpt(
        tmp_path / "d.img",
        64 * images.MIB,
        [(1, "EF02", "none"), (20, "EF00", "vfat"), (0, "8300", "ext4")],
    )
    layout = partitions.read_layout(_reader(disk.path), disk.size, 512)
    assert layout.table == "gpt" and not layout.problem
    assert [(p.number, p.start, p.size) for p in layout.partitions] == [
        (p.number, p.start, p.size) for p in disk.partitions
    ]
    assert layout.partitions[1].type == "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"  # EFI system


def test_mbr_with_logical_partitions(tmp_path: Path) -> None:
    disk = images.make_mbr(
        tmp_path / "d.img",
        64 * images.MIB,
        "label: dos\nstart=2048, size=10MiB, type=83\nstart=, size=, type=5\n"
        "size=10MiB, type=83\nsize=, type=7\n",
        ["ext4", "extended", "ext4", "ntfs"],
    )
    layout = partitions.read_layout(_reader(disk.path), disk.size, 512)
    assert layout.table == "mbr"
    assert [(p.number, p.start, p.size) for p in layout.partitions] == [
        (p.number, p.start, p.size) for p in disk.partitions if p.fs != "extended"
    ]
    assert [p.type for p in layout.partitions] == ["83", "83", "07"]


def test_gpt_with_a_bad_checksum_is_not_trusted(tmp_path: Path) -> None:
    disk = images.make_gpt(tmp_path / "d.img", 16 * images.MIB, [(0, "8300", "ext4")])
    with open(disk.path, "r+b") as f:
        f.seek(512 + 40)
        f.write(b"\x07")
    layout = partitions.read_layout(_reader(disk.path), disk.size, 512)
    assert (layout.table, layout.problem) == ("none", "GPT header checksum is wrong")
    assert [(p.start, p.size) for p in layout.partitions] == [(0, disk.size)]


def test_mbr_partition_beyond_the_disk_is_not_trusted() -> None:
    sector0 = bytearray(512)
    struct.pack_into("<B3sB3sII", sector0, 446, 0, b"", 0x83, b"", 2048, 10**6)
    sector0[510:512] = b"\x55\xaa"
    data = bytes(sector0) + bytes(1024 * 1024)
    layout = partitions.read_layout(lambda o, n: data[o : o + n], len(data), 512)
    assert layout.table == "none"
    assert "beyond the end" in layout.problem


@pytest.mark.parametrize(
    ("mkfs", "expected"),
    [
        (["mkfs.ext4", "-q", "-F"], "ext4"),
        (["mkfs.ext2", "-q", "-F"], "ext4"),
        (["mkfs.xfs", "-q", "-f"], "xfs"),
        (["mkfs.btrfs", "-q", "-f"], "btrfs"),
        (["mkntfs", "-q", "-F", "-f"], "ntfs"),
        (["mkfs.fat", "-F", "32"], "vfat"),
        (["mkfs.fat", "-F", "12", "-C"], "vfat"),
        (["mkswap"], "swap"),
    ],
)
def test_probe_recognises_filesystems(tmp_path: Path, mkfs: list[str], expected: str) -> None:
    path = tmp_path / "fs.img"
    if mkfs[-1] == "-C":  # FAT12 only exists on small volumes: let mkfs.fat create 8 MiB
        images.run(*mkfs, str(path), str(8 * 1024))
    else:
        images.create_sparse(path, 320 * images.MIB)
        images.run(*mkfs, str(path))
    assert probe.detect(_reader(path), path.stat().st_size) == expected


def test_probe_calls_random_bytes_unknown() -> None:
    data = random.Random(1).randbytes(200 * 1024)
    assert probe.detect(lambda o, n: data[o : o + n], len(data)) == "unknown"


# ---------------------------------------------------------------- FAT and NTFS maps vs tools


@pytest.mark.parametrize("bits", ["12", "16", "32"])
def test_fat_map_covers_every_file_cluster(tmp_path: Path, bits: str) -> None:
    """Files written with mtools lie inside the allocated ranges; a deleted file's clusters
    (still holding its bytes) do not."""
    path = tmp_path / "fat.img"
    size = 64 * images.MIB if bits != "12" else 4 * images.MIB
    images.create_sparse(path, size)
    images.run("mkfs.fat", "-F", bits, str(path))
    keep, gone = tmp_path / "keep.bin", tmp_path / "gone.bin"
    keep.write_bytes(b"K" * 300_000)
    gone.write_bytes(b"G" * 300_000)
    images.run("mcopy", "-i", str(path), str(gone), "::/gone.bin")
    images.run("mcopy", "-i", str(path), str(keep), "::/keep.bin")
    images.run("mdel", "-i", str(path), "::/gone.bin")
    fat = fs_fat.read_map(_reader(path))
    assert fat.kind == f"FAT{bits}"
    data = path.read_bytes()
    inside = bytearray(len(data))
    for start, length in fat.allocated:
        inside[start : start + length] = b"\x01" * length
    # A fresh filesystem stores each file contiguously.
    k_at, g_at = data.index(b"K" * 300_000), data.index(b"G" * 300_000)
    assert all(inside[k_at : k_at + 300_000]), "a live file's cluster is outside the map"
    assert not any(inside[g_at : g_at + 300_000]), "a deleted file's clusters are in the map"


def test_ntfs_map_agrees_with_ntfscluster(tmp_path: Path) -> None:
    path = tmp_path / "ntfs.img"
    images.create_sparse(path, 64 * images.MIB)
    images.run("mkntfs", "-q", "-F", "-f", str(path))
    ntfs = fs_ntfs.read_map(_reader(path))
    assert ntfs.clean
    info = images.run("ntfsinfo", "-m", str(path))

    def field(name: str) -> int:
        line = next(line for line in info.splitlines() if name in line)
        return int(line.split(":")[1].split()[0])

    cluster, free, total = (
        field("Cluster Size"),
        field("Free Clusters"),
        field("Volume Size in Clusters"),
    )
    assert extents.total(ntfs.allocated) == (total - free) * cluster


def test_fat_map_rejects_a_boot_sector_whose_fat_does_not_match(tmp_path: Path) -> None:
    """A boot sector that merely looks like FAT must not yield a map (data would be lost)."""
    path = tmp_path / "fat.img"
    images.create_sparse(path, 16 * images.MIB)
    images.run("mkfs.fat", "-F", "16", str(path))
    reserved = struct.unpack_from("<H", path.read_bytes(), 14)[0]
    with open(path, "r+b") as f:
        f.seek(reserved * 512)
        f.write(b"\x00")
    with pytest.raises(ValueError, match="media descriptor"):
        fs_fat.read_map(_reader(path))


# ---------------------------------------------------------------- read units and the copier


def test_read_units_cover_exactly_the_extents() -> None:
    rng = random.Random(11)
    wanted = extents.normalize(
        (rng.randrange(0, 64 * images.MIB) // 512 * 512, rng.randrange(1, 300) * 512)
        for _ in range(400)
    )
    units = copier.read_units(wanted, 64 * 1024)
    covered: list[tuple[int, int]] = []
    for offset, length, parts in units:
        assert 0 < length <= copier.IO_SIZE
        assert offset // copier.IO_SIZE == (offset + length - 1) // copier.IO_SIZE
        assert parts[0][0] == 0 and parts[-1][1] == length  # no gap edges are read
        covered.extend((offset + lo, hi - lo) for lo, hi in parts)
    assert extents.normalize(covered) == wanted
    # Small gaps were merged into shared reads: fewer reads than extents.
    assert len(units) < len(extents.split(wanted, copier.IO_SIZE))


def test_copier_writes_every_wanted_byte_zeros_included_never_the_gaps(tmp_path: Path) -> None:
    """Reads that span free gaps full of old data must not write the gaps; a zero run inside a
    wanted range is written (allocated), not left a hole."""
    size = 4 * images.MIB
    source, target = tmp_path / "source.bin", tmp_path / "target.bin"
    data = bytearray(random.Random(3).randbytes(size))
    zero_run = (2 * images.MIB, 8192)
    data[zero_run[0] : zero_run[0] + zero_run[1]] = bytes(zero_run[1])
    source.write_bytes(bytes(data))
    images.create_sparse(target, size)
    wanted = [(0, 12288), (16384, 4096), (40960, 8192), (images.MIB - 4096, 3 * images.MIB)]
    src = copier.open_device(str(source), write=False)
    dst = copier.open_device(str(target), write=True)
    try:
        engine = copier.Copier(jobs=4)
        engine.copy(src, dst, wanted, progress.Progress("test", size))
        engine.compare(src, dst, wanted, progress.Progress("test", size))
    finally:
        os.close(src)
        os.close(dst)
    result = target.read_bytes()
    inside = bytearray(size)
    for start, length in wanted:
        inside[start : start + length] = b"\x01" * length
    for pos in range(0, size, 4096):
        block = slice(pos, pos + 4096)
        expected = data[block] if inside[pos] else bytes(4096)
        assert result[block] == expected, f"block at {pos}"
    assert engine.bytes_written == extents.total(wanted)
    assert extents.intersect(chunks.data_extents(target), [zero_run]) == [zero_run]


def _ntfs_with_restart_pages(path: Path, pages: list[tuple[int, int]]) -> None:
    """An NTFS image whose $LogFile starts with restart pages of the given (LSN, flags)."""
    images.create_sparse(path, 32 * images.MIB)
    images.run("mkntfs", "-q", "-F", "-f", str(path))
    data = path.read_bytes()
    reader = _reader(path)
    vol = fs_ntfs._open(reader)
    log = fs_ntfs._unnamed(fs_ntfs._attributes(fs_ntfs._record(reader, vol, 2)), 0x80)
    (_vcn, _count, lcn), *_ = fs_ntfs.decode_runs(log[struct.unpack_from("<H", log, 32)[0] :])
    start = lcn * vol.cluster  # type: ignore[operator]
    image = bytearray(data)
    for index, (lsn, flags) in enumerate(pages):
        page = bytearray(b"\xff" * 4096)
        struct.pack_into("<4sHHQIIHhh", page, 0, b"RSTR", 0x1E, 9, 0, 4096, 4096, 0x30, 1, 1)
        struct.pack_into("<QHHHH", page, 0x30, lsn, 1, 0xFFFF, 0, flags)
        image[start + index * 4096 : start + (index + 1) * 4096] = page
    path.write_bytes(bytes(image))


@pytest.mark.parametrize(
    ("pages", "clean"),
    [
        ([(10, 0x2), (20, 0x0)], False),  # the newer page says in use
        ([(10, 0x0), (20, 0x2)], True),  # the newer page says clean
        ([(30, 0x2), (20, 0x0)], True),
        ([(30, 0x0)], False),
    ],
)
def test_ntfs_clean_state_follows_the_newest_restart_page(
    tmp_path: Path, pages: list[tuple[int, int]], clean: bool
) -> None:
    path = tmp_path / "ntfs.img"
    _ntfs_with_restart_pages(path, pages)
    ntfs = fs_ntfs.read_map(_reader(path))
    assert ntfs.clean is clean
    if not clean:
        assert "not replayed" in ntfs.note


def test_after_a_replay_the_plan_adds_what_it_wrote_and_nothing_else_unheld() -> None:
    """plan._limit: needed ∩ (held + what the replay wrote); every needed byte only when the
    replay's writes could not be told (issue #19)."""
    block = source_blocks.BLOCK_SIZE
    listed = source_blocks.BlockList("list", 0, [(0, 2)], 2)  # blocks 0 and 1 held
    held = source_blocks.Held(listed, 8 * block)
    needed = [(0, 8 * block)]

    def limited(written: list[tuple[int, int]] | None) -> plan.PartPlan:
        part = plan.PartPlan(partitions.Partition(1, 0, 8 * block, ""), "ext4")
        part.use(plan.ALLOCATED, list(needed))
        part.rewritten, part.written = True, written
        plan._limit(part, held)
        return part

    told = limited([(5 * block + 4096, 4096), (20 * block, 4096)])  # the second: not needed
    assert told.extents == [(0, 2 * block), (5 * block + 4096, 4096)]
    assert "the replay wrote 1 needed block(s) the list does not hold" in told.note
    untold = limited(None)
    assert untold.extents == needed and "could not be told" in untold.note


def test_a_checker_that_does_not_stop_is_stopped() -> None:
    """e2fsck -n loops on some corrupt filesystems, printing the same problems forever: the
    checker is killed once its output passes the bound (or its time), and answers None."""
    code, output = blockdev.run_bounded(["yes", "Relocate? no"], 60, 64 * 1024)
    assert code is None and output.startswith("Relocate? no\n")
    assert blockdev.run_bounded(["sh", "-c", "sleep 30"], 0.5, 1 << 20) == (None, "")
    assert blockdev.run_bounded(["sh", "-c", "echo found; exit 4"], 60, 1 << 20) == (4, "found\n")


def test_findings_are_the_checker_s_problems_without_banners_or_progress() -> None:
    output = (
        "e2fsck 1.47.0 (5-Feb-2023)\nPass 1: Checking inodes, blocks, and sizes\n"
        "Inode 12, i_blocks is 8, should be 2.  Fix? no\n\n/dev/loop7: 11/64 files (0.0% "
        "non-contiguous), 40/256 blocks\nPhase 2 - using internal log\n        - scan filesystem "
        "freespace and inode maps...\ndata fork in ino 131 claims free block 24\n"
        "Inode 12, i_blocks is 8, should be 2.  Fix? no\n"
        "Entry 'foo' in / (2) references inode 65 found in group 1's unused inodes area.\n"
        "Fix? no\n\nRelocate? no\n"
    )
    assert consistency.findings(output, "/dev/loop7") == [
        "Inode 12, i_blocks is 8, should be 2.",
        "data fork in ino 131 claims free block 24",
        "Entry 'foo' in / (2) references inode 65 found in group 1's unused inodes area.",
    ]
    assert consistency.describe(["a", "b", "c", "d", "e"]) == "a; b; c (and 2 more)"
    # values e2fsck prints differently from run to run on the same filesystem compare equal
    unstable = (
        "Inode 19, i_blocks is 2, should be 1707046078773890. Fix? no\n"
        "e2fsck(+0x36671)[0x56158648c671]"
    )
    assert consistency.findings(unstable, "/dev/x") == [
        "Inode 19, i_blocks is 2, should be N.",
        "e2fsck(+0x36671)[N]",
    ]
