"""``--source-blocks FILE``: bytes outside the snapshot's listed 512 KiB blocks are neither read
nor written.

Reads are caught two ways: in-process, every ``os.pread``/``os.preadv`` the program makes on the
source device is recorded and checked against the list byte by byte; out of process, the source
loop device's kernel counter of sectors read (``/sys/block/loopN/stat``, field 3) is compared
with the program's own accounting and with the bytes the list and the copy's needs share.
Writes are caught on the sparse target file: any write, even of zeros, allocates its chunk.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy, working_copy
from sparsecopy import cli, fs_ext, source_blocks
from sparsecopy.errors import Failure
from sparsecopy.extents import complement, intersect, normalize, total
from sparsecopy.plan import MetaReader

from devkit import disks

CHUNK = disks.CHUNK
MIB = disks.MIB


# ---------------------------------------------------------------- helpers


def _write_list(path: Path, doc: object, gz: bool = False) -> Path:
    data = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _ranges_form(chunks: set[int] | list[int], size: int) -> dict[str, object]:
    """The compact form the workflow writes: [[first, count], ...]."""
    ranges: list[list[int]] = []
    for index in sorted(chunks):
        if ranges and ranges[-1][0] + ranges[-1][1] == index:
            ranges[-1][1] += 1
        else:
            ranges.append([index, 1])
    return {"BlockSize": CHUNK, "VolumeSize": size >> 30, "BlockRanges": ranges}


def _chunk_extents(chunks: set[int] | list[int]) -> list[tuple[int, int]]:
    return normalize((index * CHUNK, CHUNK) for index in chunks)


def _chunks_in(disk: disks.DiskImage, number: int, chunks: set[int]) -> list[int]:
    part = disk.partition(number)
    end = part.start + part.size
    return sorted(c for c in chunks if part.start <= c * CHUNK and (c + 1) * CHUNK <= end)


def _sectors_read(device: str) -> int:
    """The block layer's count of 512-byte sectors read from the device."""
    return int(Path(f"/sys/block/{Path(device).name}/stat").read_text().split()[2])


def _flush(device: str) -> None:
    """Drop the device's page cache so the next buffered read reaches the block layer."""
    disks.run("blockdev", "--flushbufs", device)


def _file_chunks(disk: disks.DiskImage, number: int, name: str) -> set[int]:
    """Disk chunks wholly inside the data blocks of one file of an ext4 partition."""
    part = disk.partition(number)
    with disks.partition_loop(disk, number, read_only=True) as device:
        out = disks.run("debugfs", "-R", f"blocks /{name}", device)
        match = re.search(r"Block size:\s+(\d+)", disks.run("dumpe2fs", "-h", device))
    assert match, "dumpe2fs printed no block size"
    size = int(match[1])
    blocks = [int(b) for b in out.split()]
    extents = normalize((part.start + b * size, size) for b in blocks)
    inside: set[int] = set()
    for start, length in extents:
        first, end = -(-start // CHUNK), (start + length) // CHUNK
        inside.update(range(first, end))
    return inside


def _needed(disk: disks.DiskImage) -> list[tuple[int, int]]:
    """What the copy must carry, worked out from the layout: ext4's allocated blocks (its block
    bitmaps, as dumpe2fs shows them, plus the bytes after the filesystem), swap's header page,
    every byte of partitions without a map, and everything outside the partitions."""
    needed = complement([(p.start, p.size) for p in disk.partitions], 0, disk.size)
    for part in disk.partitions:
        if part.fs == "ext4":
            with disks.partition_loop(disk, part.number, read_only=True) as device:
                ext = fs_ext.read_map(device)
            needed += [(part.start + s, n) for s, n in ext.allocated]
            if ext.fs_bytes < part.size:
                needed.append((part.start + ext.fs_bytes, part.size - ext.fs_bytes))
        elif part.fs == "swap":
            needed.append((part.start, 4096))
        else:
            needed.append((part.start, part.size))
    return normalize(needed)


def _run_in_process(
    args: list[str], device: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict, list[tuple[int, int]]]:
    """Run the CLI in this process, recording every read it makes on ``device``."""
    rdev = os.stat(device).st_rdev
    reads: list[tuple[int, int]] = []
    lock = threading.Lock()
    real_pread, real_preadv = os.pread, os.preadv

    def on_source(fd: int) -> bool:
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        return stat.S_ISBLK(st.st_mode) and st.st_rdev == rdev

    def pread(fd: int, length: int, offset: int) -> bytes:
        if on_source(fd):
            with lock:
                reads.append((offset, length))
        return real_pread(fd, length, offset)

    def preadv(fd: int, buffers: list, offset: int, *flags: int) -> int:
        if on_source(fd):
            with lock:
                reads.append((offset, sum(len(memoryview(b)) for b in buffers)))
        return real_preadv(fd, buffers, offset, *flags)

    capsys.readouterr()
    mp = pytest.MonkeyPatch()
    mp.setattr(os, "pread", pread)
    mp.setattr(os, "preadv", preadv)
    try:
        code = cli.main(args)
    finally:
        mp.undo()
    out = capsys.readouterr().out
    return code, (json.loads(out) if code == 0 else {}), reads


def _outside(reads: list[tuple[int, int]], listed: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the reads that lie outside the listed byte ranges."""
    return [
        (offset, length)
        for offset, length in reads
        if total(intersect([(offset, length)], listed)) != length
    ]


# ---------------------------------------------------------------- disks


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> disks.DiskImage:
    """ext4 + swap (stale pages) + raw data partition (scattered writes) + never written."""
    return disks.build_ext4_swap_raw_unwritten(tmp_path_factory.mktemp("mixed") / "source.img")


@pytest.fixture(scope="module")
def omitted(mixed: disks.DiskImage) -> set[int]:
    """Chunks holding needed data that a (wrong) list leaves out: part of a kept ext4 file and
    every other data chunk of the raw partition."""
    chunks = disks.data_chunks(mixed.path)
    in_file = sorted(_file_chunks(mixed, 1, "data/file02.bin"))
    assert len(in_file) >= 4
    raw = _chunks_in(mixed, 3, chunks)
    assert len(raw) >= 6
    return set(in_file[1:3]) | set(raw[::2])


@pytest.fixture(scope="module")
def randomdisk(tmp_path_factory: pytest.TempPathFactory) -> disks.DiskImage:
    """GPT, a 24 MiB partition of random bytes and a mostly-zero one: no external tool reads."""
    return disks.build_random_partition(tmp_path_factory.mktemp("random") / "source.img")


def _copy(
    source: disks.DiskImage, tmp_path: Path, *extra: str, name: str = "target.img"
) -> tuple[dict, Path, int]:
    """Copy onto a blank target; returns the summary, the target and the sectors the kernel
    read from the source device during the copy."""
    target = blank_like(source.path, tmp_path / name)
    with attached(source.path) as src, attached(target) as dst:
        _flush(src)
        before = _sectors_read(src)
        run = sparsecopy("copy", src, dst, "--jobs", "4", "--scratch", str(tmp_path), *extra)
        read = _sectors_read(src) - before
    assert run.returncode == 0, run.stderr
    return run.summary, target, read * 512


# ---------------------------------------------------------------- never written, never read


needs_root = pytest.mark.needs_root


@needs_root
def test_unlisted_blocks_that_hold_data_are_not_written(
    mixed: disks.DiskImage, omitted: set[int], tmp_path: Path, no_leaks: None
) -> None:
    chunks = disks.data_chunks(mixed.path)
    listed = chunks - omitted
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list(listed, mixed.size))
    source = working_copy(mixed, tmp_path / "source.img")
    result, target, _ = _copy(source, tmp_path, "--source-blocks", str(blocks))

    written = disks.data_chunks(target)
    assert not written & omitted, f"unlisted chunks written: {sorted(written & omitted)}"
    assert written <= listed
    # The same copy without the list does write them: the list is what kept them out.
    plain, plain_target, _ = _copy(source, tmp_path, name="plain.img")
    assert omitted <= disks.data_chunks(plain_target)
    # Listed data is still copied byte for byte (raw partition), unlisted reads as zeros.
    for index in _chunks_in(mixed, 3, chunks):
        same = disks.same_bytes(source.path, target, index * CHUNK, CHUNK)
        assert same == (index not in omitted), f"chunk {index}"
    assert result["held_blocks"] == len(listed)
    assert 0 < result["held_blocks_read"] <= len(listed)
    assert plain["held_blocks"] is None and plain["held_blocks_read"] is None


@needs_root
@pytest.mark.parametrize("method", ["allocated", "trim"])
def test_unlisted_blocks_are_not_read_by_the_program(
    mixed: disks.DiskImage,
    omitted: set[int],
    method: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_leaks: None,
) -> None:
    """Every read the program makes on the source (MetaReader's, the copier's, the trim
    method's staging, the verify compare) lies in the list, including the head of the
    never-written partition that probing would read. The same recording without the list does
    read the omitted chunks."""
    listed = disks.data_chunks(mixed.path) - omitted
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list(listed, mixed.size))
    listed_bytes = _chunk_extents(listed)
    source = working_copy(mixed, tmp_path / "source.img")
    results = {}
    for name, extra in (("plain", []), ("listed", ["--source-blocks", str(blocks)])):
        target = blank_like(source.path, tmp_path / f"{name}.img")
        with attached(source.path) as src, attached(target) as dst:
            args = ["copy", src, dst, "--jobs", "4", "--verify", "--method", method, *extra]
            args += ["--scratch", str(tmp_path)]
            results[name] = _run_in_process(args, src, capsys)
    code, result, reads = results["listed"]
    assert code == 0
    assert reads, "no reads recorded: the recording is broken"
    stray = _outside(reads, listed_bytes)
    assert not stray, f"reads outside the list: {stray[:5]}"
    # Both kinds of reads were seen: small metadata reads (MetaReader) and copier reads.
    assert any(length < 4096 for _, length in reads)
    assert any(length >= 64 * 1024 for _, length in reads)
    # held_blocks_read is exactly the listed blocks the recorded reads touched.
    touched = {i for off, n in reads for i in range(off // CHUNK, (off + n - 1) // CHUNK + 1)}
    assert result["held_blocks_read"] == len(touched & listed)
    assert result["verified"] is True
    plain_code, _, plain_reads = results["plain"]
    assert plain_code == 0
    assert total(intersect(plain_reads, _chunk_extents(omitted))) >= len(omitted) * CHUNK // 2


@needs_root
def test_unlisted_blocks_are_not_read_by_the_kernel(
    randomdisk: disks.DiskImage, tmp_path: Path, no_leaks: None
) -> None:
    """The loop device's own count of sectors read: no more than the program says it read (so
    no readahead or hidden read reached the device) and no more than the listed needed bytes,
    while half of the random partition, left out of the list, would be 12 MiB more."""
    chunks = disks.data_chunks(randomdisk.path)
    random_part = _chunks_in(randomdisk, 1, chunks)
    omitted = set(random_part[1::2])
    listed = chunks - omitted
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list(listed, randomdisk.size))
    result, target, kernel = _copy(randomdisk, tmp_path, "--source-blocks", str(blocks))
    listed_needed = total(intersect(_chunk_extents(listed), [(0, randomdisk.size)]))
    assert 0 < kernel <= result["source_bytes_read"] + 64 * 1024
    assert result["source_bytes_read"] <= listed_needed + 256 * 1024
    assert kernel < listed_needed + len(omitted) * CHUNK // 4
    assert not disks.data_chunks(target) & omitted
    _, _, plain_kernel = _copy(randomdisk, tmp_path, name="plain.img")
    assert plain_kernel >= listed_needed + len(omitted) * CHUNK, "the counter sees reads"


@needs_root
def test_never_written_volume_with_an_empty_list_reads_nothing(
    tmp_path: Path, no_leaks: None
) -> None:
    empty = disks.build_empty(tmp_path / "empty.img", size=64 * MIB)
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list([], empty.size))
    result, target, kernel = _copy(empty, tmp_path, "--source-blocks", str(blocks))
    assert result["source_bytes_read"] == 0
    assert kernel <= MIB
    assert (result["held_blocks"], result["held_blocks_read"]) == (0, 0)
    assert result["target_bytes_written"] == 0 and disks.written_chunks(target) == 0
    assert [p["allocated_bytes"] for p in result["partitions"]] == [0]
    assert [p["needed_bytes"] for p in result["partitions"]] == [empty.size]
    plain, _, plain_kernel = _copy(empty, tmp_path, name="plain.img")
    assert plain["source_bytes_read"] >= empty.size and plain_kernel >= empty.size


@needs_root
def test_mixed_disk_reads_at_most_what_the_list_and_the_copy_share(
    mixed: disks.DiskImage, tmp_path: Path, no_leaks: None
) -> None:
    """ext4 + swap + raw + never written, with the list EBS would give (the data chunks):
    read <= 1.1 * (held ∩ needed) + 1 MiB, by the program's count and by the kernel's."""
    chunks = disks.data_chunks(mixed.path)
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list(chunks, mixed.size))
    source = working_copy(mixed, tmp_path / "source.img")
    both = total(intersect(_needed(source), _chunk_extents(chunks)))
    # No --verify here: its compare reads the same ranges again, which the kernel counts.
    result, target, kernel = _copy(source, tmp_path, "--source-blocks", str(blocks))
    bound = 1.1 * both + MIB
    assert result["source_bytes_read"] <= bound, (result["source_bytes_read"], both)
    assert kernel <= bound, (kernel, both)
    _, plain_target, plain_kernel = _copy(source, tmp_path, name="plain.img")
    assert plain_kernel > bound, "the disk must be one where the list matters"
    # Same target: everything unlisted is zero on the source anyway.
    assert disks.same_bytes(target, plain_target, 0, mixed.size)
    assert (
        disks.file_hashes(disks.DiskImage(target, mixed.size, "gpt", mixed.partitions), 1)
        == (mixed.files[1])
    )
    disks.fsck_clean(disks.DiskImage(target, mixed.size, "gpt", mixed.partitions), 1)
    assert [p["fs"] for p in result["partitions"]] == ["ext4", "swap", "unknown", "unknown"]


# ---------------------------------------------------------------- bad lists


BAD_LISTS = {
    "block-size": ({"BlockSize": 4096, "VolumeSize": 0, "Blocks": []}, "BlockSize is 4096"),
    "past-end": (
        {"BlockSize": CHUNK, "VolumeSize": 0, "Blocks": [{"BlockIndex": 0}, {"BlockIndex": 128}]},
        "lists block 128 (bytes from 67108864) past the end of source",
    ),
    "volume-size": ({"BlockSize": CHUNK, "VolumeSize": 1, "Blocks": []}, "is for a 1 GiB volume"),
    "malformed-json": ('{"BlockSize": 524288, "Blocks": [', "is not valid JSON"),
    "not-an-object": ("[1, 2]", "holds a JSON list, not an object"),
    "no-volume-size": ({"BlockSize": CHUNK, "Blocks": []}, "has no VolumeSize"),
    "negative-index": (
        {"BlockSize": CHUNK, "VolumeSize": 0, "Blocks": [{"BlockIndex": -1}]},
        "a BlockIndex is -1, not a non-negative integer",
    ),
    "bad-range": (
        {"BlockSize": CHUNK, "VolumeSize": 0, "BlockRanges": [[3]]},
        "a BlockRanges entry is [3], not [first_index, count]",
    ),
    "no-blocks": ({"BlockSize": CHUNK, "VolumeSize": 0}, "has neither Blocks nor BlockRanges"),
}


@needs_root
@pytest.mark.parametrize("case", sorted(BAD_LISTS))
def test_a_bad_list_fails_before_the_target_is_touched(
    randomdisk: disks.DiskImage, tmp_path: Path, case: str, no_leaks: None
) -> None:
    doc, message = BAD_LISTS[case]
    assert randomdisk.size == 64 * MIB  # "past-end" names block 128, the first past 64 MiB
    blocks = _write_list(tmp_path / "blocks.json", doc)
    target = blank_like(randomdisk.path, tmp_path / "target.img")
    with attached(randomdisk.path) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--source-blocks", str(blocks))
        inspected = sparsecopy("inspect", src, "--source-blocks", str(blocks))
    for result in (run, inspected):
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        assert result.error_line.startswith("sparsecopy: error: --source-blocks ")
        assert message in result.error_line, result.error_line
    assert disks.written_chunks(target) == 0, "the target was written"


@needs_root
def test_a_corrupt_gzip_list_and_a_missing_list_fail_before_the_target_is_touched(
    randomdisk: disks.DiskImage, tmp_path: Path, no_leaks: None
) -> None:
    corrupt = tmp_path / "blocks.json.gz"
    corrupt.write_bytes(gzip.compress(b'{"BlockSize": 524288}')[:12])
    target = blank_like(randomdisk.path, tmp_path / "target.img")
    with attached(randomdisk.path) as src, attached(target) as dst:
        bad = sparsecopy("copy", src, dst, "--source-blocks", str(corrupt))
        missing = sparsecopy("copy", src, dst, "--source-blocks", str(tmp_path / "nope.json"))
    assert bad.returncode == 1 and "starts like gzip but does not decompress" in bad.error_line
    assert missing.returncode == 1 and "cannot read --source-blocks" in missing.error_line
    assert disks.written_chunks(target) == 0


# ---------------------------------------------------------------- forms


def test_gzip_and_block_ranges_give_the_same_list(tmp_path: Path) -> None:
    chunks = {0, 1, 2, 7, 9, 10, 300}
    size = 2 << 30
    plain = source_blocks.load(
        str(_write_list(tmp_path / "a.json", disks.source_block_list(chunks, size)))
    )
    compact = source_blocks.load(
        str(_write_list(tmp_path / "b.json.gz", _ranges_form(chunks, size), gz=True))
    )
    assert plain.ranges == compact.ranges == [(0, 3), (7, 1), (9, 2), (300, 1)]
    assert plain.blocks == compact.blocks == 7
    assert plain.volume_gib == compact.volume_gib == 2
    # Both forms together, overlapping and unsorted, with extra keys: their union, once each.
    both = {
        "BlockSize": CHUNK,
        "VolumeSize": 2,
        "BlockToken": "ignored",
        "Blocks": [{"BlockIndex": 9, "BlockToken": "x"}, {"BlockIndex": 5}],
        "BlockRanges": [[300, 1], [0, 3], [1, 3]],
        "NextToken": None,
    }
    union = source_blocks.load(str(_write_list(tmp_path / "c.json", both)))
    assert union.ranges == [(0, 4), (5, 1), (9, 1), (300, 1)]
    assert union.blocks == 7


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"BlockSize": True, "VolumeSize": 0, "Blocks": []}, "BlockSize is true"),
        ({"BlockSize": 524288.0, "VolumeSize": 0, "Blocks": []}, "BlockSize is 524288.0"),
        ({"BlockSize": CHUNK, "VolumeSize": 0, "Blocks": [{"BlockIndex": True}]}, "is true"),
        ({"BlockSize": CHUNK, "VolumeSize": 0, "Blocks": [{"Index": 1}]}, "a Blocks entry"),
        ({"BlockSize": CHUNK, "VolumeSize": 0, "Blocks": {}}, "must be JSON lists"),
        ({"BlockSize": CHUNK, "VolumeSize": 0, "BlockRanges": [[1, 0]]}, "counts 0 blocks"),
        ({"BlockSize": CHUNK, "VolumeSize": "8", "Blocks": []}, 'VolumeSize is "8"'),
    ],
)
def test_malformed_lists_are_refused(tmp_path: Path, doc: object, message: str) -> None:
    with pytest.raises(Failure, match=re.escape(message)):
        source_blocks.load(str(_write_list(tmp_path / "blocks.json", doc)))


def test_the_list_is_checked_against_the_device(tmp_path: Path) -> None:
    path = str(_write_list(tmp_path / "b.json", _ranges_form({0, 5}, 3 << 30)))
    blocks = source_blocks.load(path)
    with pytest.raises(Failure, match="is for a 3 GiB volume"):
        source_blocks.against_device(blocks, (3 << 30) - 512, "/dev/x")
    larger = source_blocks.against_device(blocks, 4 << 30, "/dev/x")  # a larger device is fine
    assert larger.extents == [(0, CHUNK), (5 * CHUNK, CHUNK)]
    small = source_blocks.load(str(_write_list(tmp_path / "s.json", _ranges_form({5}, 0))))
    with pytest.raises(Failure, match=r"lists block 5 .* past the end"):
        source_blocks.against_device(small, 5 * CHUNK, "/dev/x")
    # A device that ends inside the last listed block: that block is held up to the end.
    edge = source_blocks.against_device(small, 5 * CHUNK + 4096, "/dev/x")
    assert edge.extents == [(5 * CHUNK, 4096)]


def test_held_clips_and_counts_blocks_read() -> None:
    blocks = source_blocks.BlockList("x", 0, [(1, 2), (6, 1)], 3)
    held = source_blocks.Held(blocks, 8 * CHUNK)
    assert held.clip([(0, 8 * CHUNK)]) == [(CHUNK, 2 * CHUNK), (6 * CHUNK, CHUNK)]
    assert held.clip([(CHUNK - 512, 1024), (3 * CHUNK - 512, 4 * CHUNK)]) == [
        (CHUNK, 512),
        (3 * CHUNK - 512, 512),
        (6 * CHUNK, CHUNK - 512),
    ]
    assert held.blocks_read() == 0
    held.touch(CHUNK + 10, 1)
    held.touch(4 * CHUNK, CHUNK)  # an unlisted block (a replayed partition): not counted
    held.touch(2 * CHUNK - 1, 2)  # ends in block 2
    assert held.blocks_read() == 2
    held.touch(0, 8 * CHUNK)
    assert held.blocks_read() == 3


def test_intersect_matches_a_brute_force_set() -> None:
    import random

    rng = random.Random(5)
    for _ in range(200):
        a = [(rng.randrange(0, 200), rng.randrange(0, 30)) for _ in range(rng.randrange(0, 6))]
        b = [(rng.randrange(0, 200), rng.randrange(0, 30)) for _ in range(rng.randrange(0, 6))]
        got = intersect(a, b)
        bytes_a = {x for s, n in a for x in range(s, s + n)}
        bytes_b = {x for s, n in b for x in range(s, s + n)}
        assert {x for s, n in got for x in range(s, s + n)} == bytes_a & bytes_b
        assert got == normalize(got)


def test_meta_reader_serves_unlisted_bytes_as_zeros_without_reading_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "disk.img"
    path.write_bytes(b"\xaa" * (4 * CHUNK + 1000))
    blocks = source_blocks.BlockList("x", 0, [(1, 1), (4, 1)], 2)
    held = source_blocks.Held(blocks, 4 * CHUNK + 1000)
    reader = MetaReader(str(path))
    try:
        reader.limit(held)
        read = reader.at(CHUNK // 2)
        data = read(0, 2 * CHUNK)  # half of block 0, all of block 1, half of block 2
        assert data == bytes(CHUNK // 2) + b"\xaa" * CHUNK + bytes(CHUNK // 2)
        assert reader.bytes_read == CHUNK
        assert reader.at(0)(4 * CHUNK + 900, 500) == b"\xaa" * 100  # short at the end, as pread
        assert reader.at(0)(5 * CHUNK, 10) == b""
        assert reader.at(0)(2 * CHUNK, 4096) == bytes(4096)
        assert reader.bytes_read == CHUNK + 100
        assert held.blocks_read() == 2
    finally:
        reader.close()


# ---------------------------------------------------------------- a truthful list changes nothing


TRUTHFUL = {
    "gpt-bios-efi-ext4": disks.build_gpt_efi_ext4,
    "mbr-two-ntfs": disks.build_mbr_ntfs,
    "gpt-xfs": disks.build_gpt_xfs,
    "gpt-xfs-crashed": lambda p: disks.build_gpt_xfs(p, crash=True),
    "bare-ext4-crashed": lambda p: disks.build_bare_ext4(p, crash=True),
}
FILESYSTEMS = ("ext4", "xfs", "ntfs", "vfat")


# The trim path with a list is exercised on one disk (time).
TRUTHFUL_CASES = [
    (name, method)
    for name in sorted(TRUTHFUL)
    for method in ("allocated", "trim")
    if method == "allocated" or name == "gpt-bios-efi-ext4"
]


@pytest.fixture(scope="module")
def truthful(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], tuple[disks.DiskImage, disks.DiskImage]]:
    """Each disk of TRUTHFUL and its recovered reference, built once for all its cases."""
    built: dict[str, tuple[disks.DiskImage, disks.DiskImage]] = {}

    def disk(name: str) -> tuple[disks.DiskImage, disks.DiskImage]:
        if name not in built:
            work = tmp_path_factory.mktemp(name)
            source = TRUTHFUL[name](work / "source.img")
            built[name] = source, disks.recovered_copy(source, work / "reference.img")
        return built[name]

    return disk


@needs_root
@pytest.mark.parametrize(("name", "method"), TRUTHFUL_CASES)
def test_a_truthful_list_copies_what_the_copy_without_it_copies(
    truthful: Callable[[str], tuple[disks.DiskImage, disks.DiskImage]],
    name: str,
    method: str,
    tmp_path: Path,
    no_leaks: None,
) -> None:
    """The list EBS gives (every chunk ever written): the same files, fsck clean, and for
    filesystems no replay wrote to, the very same target bytes as without the list."""
    pristine, reference = truthful(name)
    chunks = disks.data_chunks(pristine.path)
    blocks = _write_list(tmp_path / "blocks.json.gz", _ranges_form(chunks, pristine.size), gz=True)
    targets = {}
    results = {}
    sources = {}
    for label, extra in (("plain", []), ("listed", ["--source-blocks", str(blocks)])):
        sources[label] = working_copy(pristine, tmp_path / f"source-{label}.img").path
        results[label], targets[label], _ = _copy(
            disks.DiskImage(sources[label], pristine.size, pristine.table, pristine.partitions),
            tmp_path,
            "--method",
            method,
            "--verify",
            *extra,
            name=f"{label}.img",
        )
    result = results["listed"]
    assert result["verified"] is True
    assert result["held_blocks"] == len(chunks)
    target = disks.DiskImage(targets["listed"], pristine.size, pristine.table, pristine.partitions)
    for part in pristine.partitions:
        if part.fs in FILESYSTEMS:
            expected = disks.file_hashes(reference, part.number)
            assert disks.file_hashes(target, part.number) == expected, f"partition {part.number}"
            disks.fsck_clean(target, part.number)
    # A mount (XFS replay on the source, the trim method's on its scratch image) writes times
    # and log records: those targets differ from run to run, with or without the list.
    mounted = "crashed" in name or name.startswith("gpt-xfs") or method == "trim"
    if not mounted:
        assert disks.same_bytes(targets["listed"], targets["plain"], 0, pristine.size)
    if "crashed" not in name:  # nothing to replay: with the list the source is left as it was
        assert disks.same_bytes(sources["listed"], pristine.path, 0, pristine.size)
    if "crashed" not in name:  # a replay may write blocks the snapshot does not hold
        assert disks.data_chunks(targets["listed"]) <= chunks
    assert result["source_bytes_read"] <= results["plain"]["source_bytes_read"]
    notes = " ".join(p.get("note", "") for p in result["partitions"])
    # what a replay writes outside the list: test_replay_writes.py
    if "crashed" in name and method == "allocated":
        assert re.search(r"the replay wrote \d+ needed block\(s\) the list does not hold", notes)
    else:
        assert "the replay wrote" not in notes


@needs_root
def test_inspect_with_a_list_plans_needed_and_held(
    mixed: disks.DiskImage, tmp_path: Path, no_leaks: None
) -> None:
    chunks = disks.data_chunks(mixed.path)
    blocks = _write_list(tmp_path / "blocks.json", disks.source_block_list(chunks, mixed.size))
    with attached(mixed.path) as src:
        plain = sparsecopy("inspect", src)
        listed = sparsecopy("inspect", src, "--source-blocks", str(blocks))
    assert plain.returncode == 0 and listed.returncode == 0, listed.stderr
    assert plain.summary["held_blocks"] is None
    assert listed.summary["held_blocks"] == len(chunks)
    by_plain = {p["number"]: p for p in plain.summary["partitions"]}
    for part in listed.summary["partitions"]:
        assert part["needed_bytes"] == by_plain[part["number"]]["allocated_bytes"]
        assert part["allocated_bytes"] <= part["needed_bytes"]
    sizes = [p["allocated_bytes"] for p in listed.summary["partitions"]]
    # The never-written partition: only the part of the last chunk, which the backup GPT shares.
    assert sizes[3] < CHUNK
    assert sizes[2] < mixed.partition(3).size // 2  # the raw partition: its written chunks only
