"""Partition tables: GPT, MBR (with extended/logical partitions) or none.

Only the partitions' positions are needed: everything outside the partitions (protective MBR,
GPT headers and entry arrays, EBRs, boot-loader gaps) is copied verbatim with zero-skip.
"""

import struct
import zlib
from typing import Callable, NamedTuple

Reader = Callable[[int, int], bytes]

EXTENDED_TYPES = (0x05, 0x0F, 0x85)


class Partition(NamedTuple):
    number: int
    start: int  # bytes from the start of the disk
    size: int  # bytes
    type: str  # GPT type GUID or MBR type byte in hex; "" for a bare disk


class Layout(NamedTuple):
    table: str  # "gpt", "mbr" or "none"
    partitions: list[Partition]
    problem: str  # why a table that looked present was ignored, or ""


def _guid(raw: bytes) -> str:
    a, b, c = struct.unpack("<IHH", raw[:8])
    return f"{a:08x}-{b:04x}-{c:04x}-{raw[8:10].hex()}-{raw[10:16].hex()}"


def _gpt(read: Reader, disk_size: int, sector: int) -> list[Partition]:
    header = read(sector, sector)
    if header[:8] != b"EFI PART":
        raise ValueError("no GPT header")
    header_size = struct.unpack_from("<I", header, 12)[0]
    crc = struct.unpack_from("<I", header, 16)[0]
    check = bytearray(header[:header_size])
    check[16:20] = b"\0\0\0\0"
    if zlib.crc32(bytes(check)) != crc:
        raise ValueError("GPT header checksum is wrong")
    entries_lba, count, entry_size = struct.unpack_from("<QII", header, 72)
    entries = read(entries_lba * sector, count * entry_size)
    if zlib.crc32(entries) != struct.unpack_from("<I", header, 88)[0]:
        raise ValueError("GPT partition entries checksum is wrong")
    parts = []
    for index in range(count):
        entry = entries[index * entry_size : (index + 1) * entry_size]
        if entry[:16] == bytes(16):
            continue
        first, last = struct.unpack_from("<QQ", entry, 32)
        parts.append(
            Partition(index + 1, first * sector, (last - first + 1) * sector, _guid(entry[:16]))
        )
    return parts


def _mbr_entries(sector0: bytes) -> list[tuple[int, bytes, int, bytes, int, int]]:
    return [struct.unpack_from("<B3sB3sII", sector0, 446 + 16 * i) for i in range(4)]


def _mbr(read: Reader, sector0: bytes, sector: int) -> list[Partition]:
    parts = []
    for index, (status, _, ptype, _, lba, count) in enumerate(_mbr_entries(sector0)):
        if status not in (0, 0x80):
            raise ValueError(f"MBR entry {index + 1} has an invalid status byte")
        if ptype == 0 or count == 0:
            continue
        if ptype in EXTENDED_TYPES:
            parts.extend(_logical(read, lba, sector))
            continue
        parts.append(Partition(index + 1, lba * sector, count * sector, f"{ptype:02x}"))
    return parts


def _logical(read: Reader, extended_lba: int, sector: int) -> list[Partition]:
    parts = []
    ebr_lba = extended_lba
    seen: set[int] = set()
    number = 5
    while ebr_lba not in seen and len(seen) < 128:
        seen.add(ebr_lba)
        ebr = read(ebr_lba * sector, 512)
        if ebr[510:512] != b"\x55\xaa":
            raise ValueError(f"extended boot record at sector {ebr_lba} has no signature")
        first, second = _mbr_entries(ebr)[:2]
        if first[2] and first[5]:
            parts.append(
                Partition(
                    number, (ebr_lba + first[4]) * sector, first[5] * sector, f"{first[2]:02x}"
                )
            )
            number += 1
        if not second[2] or not second[5]:
            break
        ebr_lba = extended_lba + second[4]
    return parts


def _looks_like_boot_sector(sector0: bytes) -> bool:
    """NTFS or FAT volume boot sectors also end in 55 AA but are not partition tables."""
    if sector0[3:11] == b"NTFS    ":
        return True
    return (sector0[0] in (0xEB, 0xE9) and sector0[54:59] in (b"FAT12", b"FAT16", b"FAT  ")) or (
        sector0[82:87] == b"FAT32"
    )


def read_layout(read: Reader, disk_size: int, sector: int) -> Layout:
    """Find the partition table of a disk, checking that every partition lies on the disk."""
    sector0 = read(0, 512)
    has_signature = sector0[510:512] == b"\x55\xaa"
    types = [entry[2] for entry in _mbr_entries(sector0)] if has_signature else []
    problem = ""
    try:
        if 0xEE in types:
            parts = _gpt(read, disk_size, sector)
            table = "gpt"
        elif has_signature and any(types) and not _looks_like_boot_sector(sector0):
            parts = _mbr(read, sector0, sector)
            table = "mbr"
        else:
            return Layout("none", [Partition(1, 0, disk_size, "")], "")
        _check(parts, disk_size)
        return Layout(table, sorted(parts, key=lambda p: p.start), "")
    except ValueError as exc:
        problem = str(exc)
    # A table we cannot trust: copy the disk as one unknown region rather than lose data.
    return Layout("none", [Partition(1, 0, disk_size, "")], problem)


def _check(parts: list[Partition], disk_size: int) -> None:
    ordered = sorted(parts, key=lambda p: p.start)
    for part in ordered:
        if part.start + part.size > disk_size:
            raise ValueError(f"partition {part.number} extends beyond the end of the disk")
    for a, b in zip(ordered, ordered[1:]):
        if a.start + a.size > b.start:
            raise ValueError(f"partitions {a.number} and {b.number} overlap")
