"""NTFS read without ntfs-3g: the boot sector, $MFT's runs, $Bitmap and the clean-state checks.

Amazon Linux 2023 ships no NTFS tools, so the cluster bitmap ($Bitmap, MFT record 6) is parsed
here. A volume that was not shut down cleanly ($Volume dirty flag or an active $LogFile) has
changes only Windows can replay, so the caller then copies every non-zero block instead.
"""

import struct
from collections.abc import Iterator
from typing import Callable, NamedTuple, Optional

from .bitmap import set_bit_runs
from .extents import Extents, complement, intersect, normalize

Reader = Callable[[int, int], bytes]  # (offset within the partition, length)

ATTR_VOLUME_INFORMATION = 0x70
ATTR_DATA = 0x80
ATTR_LIST = 0x20
VOLUME_IS_DIRTY = 0x0001
RESTART_VOLUME_IS_CLEAN = 0x0002


class NtfsError(ValueError):
    """The volume's metadata is not what this parser understands."""


class NtfsMap(NamedTuple):
    allocated: Extents  # bytes within the partition
    # Clusters a record in use maps through its runlists that $Bitmap calls free (bytes within
    # the partition): where not empty, $Bitmap is not trusted (the caller copies raw).
    unmarked: Extents
    # Bytes the clusters cover. The backup boot sector lies after them (the partition's last
    # sector), so the plan copies it as the partition's tail: ntfsclone keeps it too, while
    # partclone.ntfs leaves it out (one 512 KiB chunk fewer on the 2 GiB bench disk). It is the
    # boot sector's only recovery copy (ntfsfix, chkdsk), so it stays.
    fs_bytes: int
    clean: bool
    note: str


class _Volume(NamedTuple):
    cluster: int
    clusters: int
    record_size: int
    mft_runs: list[tuple[int, int, Optional[int]]]  # (vcn, count, lcn or None)


def _boot(read: Reader) -> tuple[int, int, int, int]:
    boot = read(0, 512)
    if boot[3:11] != b"NTFS    ":
        raise NtfsError("no NTFS boot sector")
    sector, per_cluster = struct.unpack_from("<HB", boot, 11)
    if per_cluster > 0x80:
        per_cluster = 1 << (256 - per_cluster)
    total_sectors, mft_lcn = struct.unpack_from("<QQ", boot, 40)
    per_record = struct.unpack_from("<b", boot, 64)[0]
    cluster = sector * per_cluster
    record_size = cluster * per_record if per_record > 0 else 1 << -per_record
    if cluster == 0 or record_size < 512:
        raise NtfsError("NTFS boot sector has an impossible geometry")
    return cluster, total_sectors * sector, mft_lcn, record_size


def _fixup(record: bytearray, sector: int = 512) -> None:
    usa_offset, usa_count = struct.unpack_from("<HH", record, 4)
    usn = record[usa_offset : usa_offset + 2]
    for i in range(1, usa_count):
        end = i * sector
        if end > len(record):
            break
        if record[end - 2 : end] != usn:
            raise NtfsError("MFT record failed its update-sequence check (torn write)")
        record[end - 2 : end] = record[usa_offset + 2 * i : usa_offset + 2 * i + 2]


def decode_runs(data: bytes) -> list[tuple[int, int, Optional[int]]]:
    """NTFS mapping pairs -> [(vcn, cluster count, lcn or None for sparse)]."""
    runs: list[tuple[int, int, Optional[int]]] = []
    pos, vcn, lcn = 0, 0, 0
    while pos < len(data) and data[pos] != 0:
        header = data[pos]
        len_size, off_size = header & 0x0F, header >> 4
        pos += 1
        count = int.from_bytes(data[pos : pos + len_size], "little")
        pos += len_size
        if off_size:
            lcn += int.from_bytes(data[pos : pos + off_size], "little", signed=True)
            runs.append((vcn, count, lcn))
        else:
            runs.append((vcn, count, None))
        pos += off_size
        vcn += count
    return runs


def _attributes(record: bytes) -> dict[int, list[bytes]]:
    if record[:4] != b"FILE":
        raise NtfsError("MFT record has no FILE signature")
    attrs: dict[int, list[bytes]] = {}
    pos = struct.unpack_from("<H", record, 20)[0]
    while pos + 8 <= len(record):
        kind, length = struct.unpack_from("<II", record, pos)
        if kind == 0xFFFFFFFF or length == 0:
            break
        attrs.setdefault(kind, []).append(record[pos : pos + length])
        pos += length
    return attrs


def _unnamed(attrs: dict[int, list[bytes]], kind: int) -> bytes:
    for attr in attrs.get(kind, []):
        if attr[9] == 0:  # name length
            return attr
    raise NtfsError(f"MFT record has no unnamed attribute 0x{kind:x}")


def _value(read: Reader, cluster: int, attr: bytes) -> bytes:
    """The content of a resident or non-resident attribute."""
    if attr[8] == 0:
        length, offset = struct.unpack_from("<IH", attr, 16)
        return attr[offset : offset + length]
    runs_offset = struct.unpack_from("<H", attr, 32)[0]
    size = struct.unpack_from("<Q", attr, 48)[0]
    out = bytearray()
    for _vcn, count, lcn in decode_runs(attr[runs_offset:]):
        if lcn is None:
            out += bytes(count * cluster)
        else:
            out += read(lcn * cluster, count * cluster)
        if len(out) >= size:
            break
    return bytes(out[:size])


def _record(read: Reader, vol: _Volume, number: int) -> bytes:
    offset = number * vol.record_size
    for vcn, count, lcn in vol.mft_runs:
        start = vcn * vol.cluster
        if start <= offset < start + count * vol.cluster and lcn is not None:
            raw = bytearray(read(lcn * vol.cluster + offset - start, vol.record_size))
            _fixup(raw)
            return bytes(raw)
    raise NtfsError(f"MFT record {number} is not mapped")


def _open(read: Reader) -> _Volume:
    cluster, fs_bytes, mft_lcn, record_size = _boot(read)
    raw = bytearray(read(mft_lcn * cluster, record_size))
    _fixup(raw)
    data = _unnamed(_attributes(bytes(raw)), ATTR_DATA)
    if data[8] == 0:
        raise NtfsError("$MFT data is resident")
    runs = decode_runs(data[struct.unpack_from("<H", data, 32)[0] :])
    return _Volume(cluster, fs_bytes // cluster, record_size, runs)


def _clean(read: Reader, vol: _Volume) -> tuple[bool, str]:
    volume = _attributes(_record(read, vol, 3))
    info = _value(read, vol.cluster, _unnamed(volume, ATTR_VOLUME_INFORMATION))
    if struct.unpack_from("<H", info, 10)[0] & VOLUME_IS_DIRTY:
        return False, "NTFS volume is marked dirty (not shut down cleanly)"
    log = _attributes(_record(read, vol, 2))
    head = _value_head(read, vol.cluster, _unnamed(log, ATTR_DATA), 2 * 4096)
    if head.strip(b"\xff") == b"":
        return True, ""  # emptied log (mkntfs and ntfs-3g leave it so)
    # Two restart pages; Windows alternates between them, the newer (higher LSN) one counts.
    newest: Optional[tuple[int, int]] = None  # (current LSN, flags)
    page_size = struct.unpack_from("<I", head, 16)[0] if head[:4] in (b"RSTR", b"CHKD") else 4096
    if page_size not in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536):
        raise NtfsError(f"NTFS $LogFile restart page size {page_size} is impossible")
    for page in (0, page_size):
        header = _value_head(read, vol.cluster, _unnamed(log, ATTR_DATA), page + 512)[page:]
        if header[:4] not in (b"RSTR", b"CHKD"):
            continue
        area = struct.unpack_from("<H", header, 24)[0]
        lsn, _clients, _free, _in_use, flags = struct.unpack_from("<QHHHH", header, area)
        if newest is None or lsn > newest[0]:
            newest = (lsn, flags)
    if newest is None:
        return False, "NTFS $LogFile has no restart page"
    if not newest[1] & RESTART_VOLUME_IS_CLEAN:
        return False, "NTFS $LogFile holds changes Windows has not replayed"
    return True, ""


def _value_head(read: Reader, cluster: int, attr: bytes, length: int) -> bytes:
    if attr[8] == 0:
        return _value(read, cluster, attr)[:length]
    runs_offset = struct.unpack_from("<H", attr, 32)[0]
    runs = decode_runs(attr[runs_offset:])
    if not runs or runs[0][2] is None or runs[0][1] * cluster < length:
        raise NtfsError("$LogFile does not start with its restart pages in one run")
    return read(runs[0][2] * cluster, length)


FILE_RECORD_IN_USE = 0x0001
MFT_CHUNK = 4 * 1024 * 1024  # bytes of $MFT read at a time


def _mft_records(read: Reader, vol: _Volume, mft_bytes: int) -> "Iterator[bytes]":
    """Every MFT record in use, fixed up; a torn record (failed update sequence) is left out:
    chkdsk would not trust its runs either."""
    done = 0
    for _vcn, count, lcn in vol.mft_runs:
        if lcn is None:
            continue
        length = min(count * vol.cluster, mft_bytes - done)
        for at in range(0, length, MFT_CHUNK):
            chunk = read(lcn * vol.cluster + at, min(MFT_CHUNK, length - at))
            for pos in range(0, len(chunk) - vol.record_size + 1, vol.record_size):
                record = bytearray(chunk[pos : pos + vol.record_size])
                if record[:4] != b"FILE" or not record[22] & FILE_RECORD_IN_USE:
                    continue
                try:
                    _fixup(record)
                except (NtfsError, struct.error):
                    continue
                yield bytes(record)
        done += length


def mapped_clusters(read: Reader, vol: _Volume) -> "list[tuple[int, int]]":
    """(first cluster, count) of every run of every non-resident attribute of every MFT record
    in use: what the files and the metadata files still reference."""
    mft = _unnamed(_attributes(_record(read, vol, 0)), ATTR_DATA)
    mft_bytes = struct.unpack_from("<Q", mft, 48)[0]  # allocated size of $MFT's data
    runs: list[tuple[int, int]] = []
    for record in _mft_records(read, vol, mft_bytes):
        try:
            attributes = _attributes(record)
        except (NtfsError, struct.error):
            continue
        for attrs in attributes.values():
            for attr in attrs:
                if len(attr) > 34 and attr[8] == 1:  # non-resident
                    offset = struct.unpack_from("<H", attr, 32)[0]
                    runs.extend(
                        (lcn, count)
                        for _vcn, count, lcn in decode_runs(attr[offset:])
                        if lcn is not None and count
                    )
    return runs


def read_map(read: Reader) -> NtfsMap:
    """Allocated clusters from $Bitmap, the clusters the MFT's runlists reference that $Bitmap
    calls free, and whether the volume was shut down cleanly."""
    vol = _open(read)
    bitmap_attrs = _attributes(_record(read, vol, 6))
    if ATTR_LIST in bitmap_attrs:
        raise NtfsError("$Bitmap is described by an attribute list (too fragmented to map)")
    bitmap = _value(read, vol.cluster, _unnamed(bitmap_attrs, ATTR_DATA))
    clean, note = _clean(read, vol)
    allocated = [
        (first * vol.cluster, count * vol.cluster)
        for first, count in set_bit_runs(bitmap, vol.clusters)
    ]
    mapped = normalize(
        (lcn * vol.cluster, count * vol.cluster) for lcn, count in mapped_clusters(read, vol)
    )
    unmarked = intersect(mapped, complement(allocated, 0, vol.clusters * vol.cluster))
    return NtfsMap(allocated, unmarked, vol.clusters * vol.cluster, clean, note)
