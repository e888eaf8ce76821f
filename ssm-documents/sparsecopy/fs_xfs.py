"""XFS: replay the log by mounting and unmounting, then read the free-space btrees (xfs_db)."""

import re
from typing import NamedTuple

from .blockdev import mounted, run
from .errors import Failure
from .extents import Extents, complement


class XfsMap(NamedTuple):
    allocated: Extents
    fs_bytes: int


def replay_log(device: str) -> str:
    """Mount and unmount (nouuid: the instance may run a clone of the same image). Returns ""
    on success or why it failed."""
    try:
        with mounted(device, "xfs", "nouuid"):
            pass
    except Failure as exc:
        if str(exc).startswith("could not unmount"):
            raise  # still mounted: copying it now would read a live filesystem
        return f"log replay by mount failed: {exc}"
    return ""


def read_map(device: str) -> XfsMap:
    sb = run(["xfs_db", "-r", "-c", "sb 0", "-c", "p blocksize agblocks dblocks", device]).stdout
    values = dict(re.findall(r"^(\w+) = (\d+)$", sb, re.M))
    block_size, ag_blocks, blocks = (
        int(values["blocksize"]),
        int(values["agblocks"]),
        int(values["dblocks"]),
    )
    free = []
    dump = run(["xfs_db", "-r", "-c", "freesp -d", device]).stdout
    for agno, agbno, length in re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$", dump, re.M):
        start = (int(agno) * ag_blocks + int(agbno)) * block_size
        free.append((start, int(length) * block_size))
    fs_bytes = blocks * block_size
    return XfsMap(complement(free, 0, fs_bytes), fs_bytes)
