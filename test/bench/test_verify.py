from pathlib import Path

from bench.allocation import Allocation
from bench.disk import MIB, Disk, Layout, Part
from bench.system import Resources
from bench.verify import byte_differences, check_target, outside_filesystems
from devkit.chunks import CHUNK
from devkit.restore import absent_block


def test_outside_filesystems_keeps_tables_gaps_and_other_partitions() -> None:
    parts = [Part(1, "ext4", MIB, 4 * MIB), Part(3, "ntfs", 8 * MIB, 2 * MIB)]
    needed = [(0, 2 * MIB), (6 * MIB, 4 * MIB), (11 * MIB, MIB)]
    assert outside_filesystems(needed, parts, 12 * MIB) == [
        (0, MIB),
        (6 * MIB, 2 * MIB),
        (11 * MIB, MIB),
    ]


def image(path: Path, writes: dict[int, bytes]) -> Path:
    with path.open("wb") as f:
        f.truncate(8 * CHUNK)
        for offset, data in writes.items():
            f.seek(offset)
            f.write(data)
    return path


def test_byte_differences_finds_changes_only_inside_the_ranges(tmp_path: Path) -> None:
    source = image(tmp_path / "s.img", {10: b"abc", 3 * CHUNK: b"raw"})
    same = image(tmp_path / "t1.img", {10: b"abc", 3 * CHUNK: b"raw"})
    assert byte_differences(source, same, [(0, 8 * CHUNK)]) == []
    # data missing on the target, and data the source never had (holes are zeros)
    lost = image(tmp_path / "t2.img", {10: b"abc", 5 * CHUNK: b"new"})
    problems = byte_differences(source, lost, [(0, 8 * CHUNK)])
    assert [p.split("..")[0] for p in problems] == [f"bytes {3 * CHUNK}", f"bytes {5 * CHUNK}"]
    assert byte_differences(source, lost, [(0, CHUNK)]) == []
    # an explicitly written zero equals a hole
    zeros = image(tmp_path / "t3.img", {10: b"abc", 3 * CHUNK: b"raw", 6 * CHUNK: bytes(9)})
    assert byte_differences(source, zeros, [(0, 8 * CHUNK)]) == []


def test_byte_differences_lists_at_most_five(tmp_path: Path) -> None:
    source = image(tmp_path / "s.img", {i * CHUNK: b"x" for i in range(8)})
    target = image(tmp_path / "t.img", {})
    problems = byte_differences(source, target, [(0, 8 * CHUNK)])
    assert len(problems) == 6 and problems[-1] == "(more not listed)"


def test_on_an_encrypted_restore_only_held_chunks_are_compared(tmp_path: Path) -> None:
    # the source holds chunk 1; chunk 2 was never written (its own encrypted restore is random)
    source = image(tmp_path / "s.img", {CHUNK: b"held"})
    restored = image(tmp_path / "t.img", {CHUNK: b"held", 2 * CHUNK: absent_block("k", 2)})
    disk = Disk("raw", source, Layout(None, 8 * CHUNK, (Part(1, "raw", 0, 8 * CHUNK),)))
    alloc = Allocation([(0, 8 * CHUNK)], 8 * CHUNK, {})
    res = Resources()  # no filesystem: nothing is attached
    assert check_target(disk, alloc, restored, tmp_path, res) == [
        f"bytes {2 * CHUNK}..{3 * CHUNK} differ"
    ]
    assert check_target(disk, alloc, restored, tmp_path, res, held={1}) == []
    # a held chunk the copy dropped reads random on the restore: found
    dropped = image(tmp_path / "d.img", {CHUNK: absent_block("k", 1)})
    assert check_target(disk, alloc, dropped, tmp_path, res, held={1}) == [
        f"bytes {CHUNK}..{2 * CHUNK} differ"
    ]
