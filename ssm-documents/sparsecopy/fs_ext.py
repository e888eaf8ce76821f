"""ext2/3/4: replay the journal with e2fsck, then read the block bitmaps through dumpe2fs."""

import re
from typing import NamedTuple

from .blockdev import run
from .extents import Extents, complement


class ExtMap(NamedTuple):
    allocated: Extents  # bytes within the filesystem
    fs_bytes: int  # end of the filesystem within the partition
    clean: bool
    note: str


def needs_recovery(device: str) -> bool:
    """Whether the journal holds changes not yet written to their home locations."""
    return "needs_recovery" in _features(run(["dumpe2fs", "-h", device]).stdout)


def replay_journal(device: str) -> str:
    """Replay the pending journal (the only write this program makes to a source). Returns ""
    on success, else why it failed."""
    proc = run(["e2fsck", "-E", "journal_only", "-p", device], check=False)
    if proc.returncode not in (0, 1):  # 1 = fixed (journal replayed)
        return f"journal replay failed: {proc.stderr.strip() or proc.stdout.strip()}"
    return ""


def _features(header: str) -> str:
    match = re.search(r"^Filesystem features:\s*(.*)$", header, re.M)
    return match.group(1) if match else ""


def _field(header: str, name: str) -> str:
    match = re.search(rf"^{name}:\s*(.*)$", header, re.M)
    if not match:
        raise ValueError(f"dumpe2fs printed no '{name}'")
    return match.group(1).strip()


def read_map(device: str) -> ExtMap:
    """Allocated byte ranges from the block bitmaps, and whether the filesystem is clean."""
    out = run(["dumpe2fs", device]).stdout
    block_size = int(_field(out, "Block size"))
    blocks = int(_field(out, "Block count"))
    state = _field(out, "Filesystem state")
    features = _features(out)
    free = []
    for line in re.findall(r"^\s+Free blocks: (.*)$", out, re.M):
        for item in line.split(","):
            item = item.strip()
            if not item:
                continue
            lo, _, hi = item.partition("-")
            first, last = int(lo), int(hi or lo)
            free.append((first * block_size, (last - first + 1) * block_size))
    fs_bytes = blocks * block_size
    clean = state == "clean" and "needs_recovery" not in features
    note = "" if clean else f"filesystem state '{state}', features '{features}'"
    return ExtMap(complement(free, 0, fs_bytes), fs_bytes, clean, note)
