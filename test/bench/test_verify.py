from pathlib import Path

from bench.disk import MIB, Part
from bench.verify import byte_differences, outside_filesystems
from devkit.chunks import CHUNK


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
