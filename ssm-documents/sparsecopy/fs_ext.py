"""ext2/3/4: replay the journal with e2fsck, then read the block bitmaps through dumpe2fs.

Group metadata no reader relies on counts as free (not needed: docs/data-plane.md, "What is
needed"): the inode-table blocks no inode can occupy of a group NOT flagged ITABLE_ZEROED (the
whole table of a group flagged INODE_UNINIT; in other groups the blocks past the last inode the
group may have used, inodes per group minus the descriptor's unused-inode count rounded up to
whole blocks: the kernel's own bound in ext4_init_inode_table), the inode bitmap of an
INODE_UNINIT group and the block bitmap of a BLOCK_UNINIT group. mke2fs never writes them
(lazy_itable_init; uninitialised bitmaps), so on a volume that held data before mkfs (no
discard, as on EBS) they keep stale bytes until a read-write mount's lazyinit thread zeroes the
tables (and then sets ITABLE_ZEROED). Neither the kernel nor e2fsck reads them while the group
descriptor checksums hold: the kernel builds an uninitialised group's bitmaps in memory, zeroes
a table's tail itself before it flags the group ITABLE_ZEROED, and zeroes a new inode's buffer
instead of reading a block whose other inodes are all free; libext2fs does the same and
e2fsck's inode scan stops at the unused count. Their bytes are stale garbage on the source
already, so random bytes there (an encrypted restore of a block the copy leaves out) are no
different. So they are free only when the filesystem has group descriptor checksums
(metadata_csum or uninit_bg) and the group's checksum is valid: dumpe2fs prints "(EXPECTED
0x...)" after one that does not match (and then fails reading the bitmaps, so the plan copies
the partition raw); e2fsck would reset the flags and the count and read everything.

A group flagged ITABLE_ZEROED keeps its whole inode table: the flag promises that the unused
inodes read as zeros, the kernel never zeroes that table again, and any reader that stops
trusting the unused count (e2fsck after a checksum error, a future tool) reads the tail as
inodes: random bytes there would look like corrupt inodes.

Backup superblocks and group descriptors stay allocated although e2image -ra copies only the
primary ones (five 512 KiB chunks on the 2 GiB bench disk): a copy without them checks clean but
has lost the only recovery copies (e2fsck -b), and neither e2fsck nor a mount writes them back.
"""

import re
from typing import NamedTuple

from .blockdev import run
from .extents import Extents, complement

GROUP_CSUM_FEATURES = ("metadata_csum", "uninit_bg", "gdt_csum")


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


def unread_group_metadata(dump: str) -> Extents:
    """Byte ranges of the group metadata no reader reads (see the module's docstring), from
    dumpe2fs's full output; empty without group descriptor checksums. A group whose section is
    not understood, or whose descriptor checksum does not match, contributes nothing."""
    if not any(f in _features(dump).split() for f in GROUP_CSUM_FEATURES):
        return []
    block_size = int(_field(dump, "Block size"))
    per_group = int(_field(dump, "Inodes per group"))
    table_blocks = int(_field(dump, "Inode blocks per group"))
    inode_size = int(_field(dump, "Inode size"))
    per_block = block_size // inode_size
    if per_block < 1 or table_blocks * per_block < per_group:
        return []
    out: Extents = []
    sections = re.split(r"^(?=Group \d+: )", dump, flags=re.M)[1:]
    for section in sections:
        header = section.split("\n", 1)[0]
        csum = re.search(r"\bcsum 0x[0-9a-f]+(.*)$", header)
        table = re.search(r"^\s+Inode table at (\d+)-(\d+)\b", section, re.M)
        unused = re.search(r"\b(\d+) unused inodes\b", section)
        if not csum or "EXPECTED" in csum.group(1) or not table or not unused:
            continue
        first, last = int(table.group(1)), int(table.group(2))
        flags = re.search(r"\[([A-Z_, ]*)\]", header)
        names = flags.group(1).replace(" ", "").split(",") if flags else []
        uninit = "INODE_UNINIT" in names
        if last - first + 1 != table_blocks or int(unused.group(1)) > per_group:
            continue
        zeroed = "ITABLE_ZEROED" in names
        for flag, bitmap in (("BLOCK_UNINIT", "Block"), ("INODE_UNINIT", "Inode")):
            at = re.search(rf"^\s+{bitmap} bitmap at (\d+)\b", section, re.M)
            if flag in names and at:
                out.append((int(at.group(1)) * block_size, block_size))
        used_inodes = 0 if uninit else per_group - int(unused.group(1))
        used_blocks = -(-used_inodes // per_block)
        if used_blocks < table_blocks and not zeroed:
            start = (first + used_blocks) * block_size
            out.append((start, (table_blocks - used_blocks) * block_size))
    return out


def read_map(device: str) -> ExtMap:
    """Allocated byte ranges from the block bitmaps less the group metadata no reader reads,
    and whether the filesystem is clean."""
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
    free.extend(unread_group_metadata(out))
    clean = state == "clean" and "needs_recovery" not in features
    note = "" if clean else f"filesystem state '{state}', features '{features}'"
    return ExtMap(complement(free, 0, fs_bytes), fs_bytes, clean, note)
