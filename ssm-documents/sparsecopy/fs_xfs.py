"""XFS: replay the log by mounting and unmounting, then read the free-space btrees (xfs_db)."""

import re
from typing import NamedTuple, Optional

from .blockdev import mounted, run
from .errors import Failure
from .extents import Extent, Extents, complement, normalize

SECTOR = 512  # xfs_logprint's blkno and len count 512-byte basic blocks


class XfsMap(NamedTuple):
    allocated: Extents
    fs_bytes: int


def log_is_clean(device: str) -> bool:
    """Whether the log holds nothing to replay: xfs_logprint finds its tail at its head after
    an unmount record, as the kernel's mount would. False when that cannot be told."""
    try:
        proc = run(["xfs_logprint", "-t", device], check=False)
    except Failure:  # not installed
        return False
    match = re.search(r"log tail: (\d+) head: (\d+) state: <(\w+)>", proc.stdout)
    return proc.returncode == 0 and match is not None and match.group(3) == "CLEAN"


def replay_log(device: str) -> str:
    """Mount and unmount (nouuid: the instance may run a clone of the same image) unless the
    log is clean. Returns "" on success or why it failed.

    A mount of a clean log replays nothing but still writes: the kernel stamps up to 2 MiB of
    log blocks past the head (xlog_clear_stale_blocks) and an unmount record, so a copy made
    after it carries up to four 512 KiB chunks the source did not hold (measured: 2 GiB
    seed-000 disk with a busy log, 1,576 chunks after a mount vs 1,572 for xfs_copy -d and for
    this copy without it)."""
    if log_is_clean(device):
        return ""
    try:
        with mounted(device, "xfs", "nouuid"):
            pass
    except Failure as exc:
        if str(exc).startswith("could not unmount"):
            raise  # still mounted: copying it now would read a live filesystem
        return f"log replay by mount failed: {exc}"
    return ""


def _geometry(device: str, *names: str) -> dict[str, int]:
    out = run(["xfs_db", "-r", "-c", "sb 0", "-c", f"p {' '.join(names)}", device]).stdout
    values = {k: int(v, 0) for k, v in re.findall(r"^(\w+) = (0x[0-9a-f]+|\d+)$", out, re.M)}
    missing = [n for n in names if n not in values]
    if missing:
        raise ValueError(f"xfs_db printed no {', '.join(missing)}")
    return values


def log_range(device: str) -> Optional[Extent]:
    """The internal log's byte range within the partition (None for an external log)."""
    sb = _geometry(device, "blocksize", "logstart", "logblocks")
    if sb["logstart"] == 0:
        return None
    return (sb["logstart"] * sb["blocksize"], sb["logblocks"] * sb["blocksize"])


def _inode_cluster(ino: int, sb: dict[str, int]) -> Extent:
    """The inode cluster buffer holding inode ``ino`` (what recovery of an inode item writes):
    8 KiB scaled by the inode size on v5 filesystems, aligned within its AG when the
    filesystem aligns inode chunks (else every block a cluster holding it may span)."""
    per_block_log, ag_log, size = sb["inopblog"], sb["agblklog"], sb["blocksize"]
    agno, agino = ino >> (ag_log + per_block_log), ino & ((1 << (ag_log + per_block_log)) - 1)
    agbno = agino >> per_block_log
    cluster = 8192 * max(1, sb["inodesize"] // 256) if sb["versionnum"] & 0xF >= 5 else 8192
    blocks = max(1, cluster // size)
    align = sb["inoalignmt"]
    if align and align % blocks == 0:
        first, count = agbno - agbno % blocks, blocks
    else:
        first, count = max(agbno - blocks + 1, 0), 2 * blocks - 1
    return ((agno * sb["agblocks"] + first) * size, count * size)


def log_writes(device: str) -> Optional[Extents]:
    """Byte ranges of the partition that log recovery writes home, read before the mount from
    the log's transactions between tail and head (``xfs_logprint -t``, which finds them as the
    kernel does): every buffer and dquot (``blkno``/``len`` in 512-byte units), the cluster of
    every logged inode, every inode chunk an icreate item initialises, and the superblock.
    Writes to the log itself are not here (the caller compares the log's blocks before and
    after the mount). None when xfs_logprint cannot read the log."""
    sb = _geometry(
        device, "blocksize", "agblocks", "sectsize", "inodesize", "inopblog", "agblklog",
        "inoalignmt", "versionnum",
    )  # fmt: skip
    proc = run(["xfs_logprint", "-t", device], check=False)
    if proc.returncode != 0 or "log tail:" not in proc.stdout:
        return None
    out = proc.stdout
    written: Extents = [(0, sb["sectsize"])]
    for blkno, length in re.findall(r"\bblkno: ?0x([0-9a-f]+)\s+len: ?(\d+)", out):
        written.append((int(blkno, 16) * SECTOR, int(length) * SECTOR))
    for ino in re.findall(r"\bINODE: #regs: ?\d+\s+ino: ?0x([0-9a-f]+)", out):
        written.append(_inode_cluster(int(ino, 16), sb))
    icreate = r"ICR:\s+#ag: (\d+)\s+agbno: 0x([0-9a-f]+)\s+len: (\d+)"
    for agno, agbno, length in re.findall(icreate, out):
        start = (int(agno) * sb["agblocks"] + int(agbno, 16)) * sb["blocksize"]
        written.append((start, int(length) * sb["blocksize"]))
    return normalize(written)


def read_map(device: str) -> XfsMap:
    sb = _geometry(device, "blocksize", "agblocks", "dblocks")
    block_size, ag_blocks, blocks = sb["blocksize"], sb["agblocks"], sb["dblocks"]
    free = []
    dump = run(["xfs_db", "-r", "-c", "freesp -d", device]).stdout
    for agno, agbno, length in re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$", dump, re.M):
        start = (int(agno) * ag_blocks + int(agbno)) * block_size
        free.append((start, int(length) * block_size))
    fs_bytes = blocks * block_size
    return XfsMap(complement(free, 0, fs_bytes), fs_bytes)
