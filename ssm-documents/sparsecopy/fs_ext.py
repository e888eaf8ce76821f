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
from typing import NamedTuple, Optional

from .blockdev import run
from .extents import Extents, complement, normalize

GROUP_CSUM_FEATURES = ("metadata_csum", "uninit_bg", "gdt_csum")


class ExtMap(NamedTuple):
    allocated: Extents  # bytes within the filesystem
    fs_bytes: int  # end of the filesystem within the partition
    clean: bool
    note: str
    errors: bool  # the kernel recorded errors in the superblock (state "... with errors")


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


def _tid_after(a: int, b: int) -> bool:
    """jbd2's tid_gt: transaction ids wrap at 2**32."""
    return 0 < (a - b) & 0xFFFFFFFF < 0x80000000


def _logged_blocks(logdump: str) -> set[int]:
    """The filesystem blocks jbd2 recovery writes home, from ``debugfs -R "logdump -a"``: every
    block tagged in a committed transaction unless a revoke record of that or a later committed
    transaction names it (recovery.c: a transaction without its commit block is not replayed)."""
    tagged: dict[int, list[int]] = {}
    revoked: dict[int, list[int]] = {}
    committed: set[int] = set()
    sequence = -1
    for line in logdump.splitlines():
        found = re.match(r"(?:Found expected sequence|Dumping \w+ block, sequence) (\d+)", line)
        if found:
            sequence = int(found.group(1))
            if re.search(r", type 2 \(commit block\)", line):
                committed.add(sequence)
            continue
        tag = re.match(r"\s+FS block (\d+) logged at journal block", line)
        if tag:
            tagged.setdefault(sequence, []).append(int(tag.group(1)))
        revoke = re.match(r"\s+Revoke FS block (\d+)", line)
        if revoke:
            revoked.setdefault(sequence, []).append(int(revoke.group(1)))
    last_revoke: dict[int, int] = {}
    for sequence in committed & set(revoked):
        for block in revoked[sequence]:
            seen = last_revoke.get(block)
            if seen is None or _tid_after(sequence, seen):
                last_revoke[block] = sequence
    out: set[int] = set()
    for sequence in committed & set(tagged):
        for block in tagged[sequence]:
            revoke_seq = last_revoke.get(block)
            if revoke_seq is None or _tid_after(sequence, revoke_seq):
                out.add(block)
    return out


def journal_writes(device: str) -> Optional[Extents]:
    """Byte ranges of the partition that the pending journal's replay (``replay_journal``) writes,
    read before it runs: the blocks the journal logs (``_logged_blocks``), the journal's own
    superblock, and what e2fsck rewrites when it closes the filesystem (boot block, superblock,
    primary group descriptors; the MMP block). None when that cannot be told: an external
    journal, fast commits (their replay rewrites inodes and bitmaps from tags, not logged
    blocks), or a journal debugfs cannot dump."""
    header = run(["dumpe2fs", "-h", device]).stdout
    features = _features(header).split()
    if "fast_commit" in features or not re.search(r"^Journal inode:\s*8$", header, re.M):
        return None
    # -c (do not read the bitmaps): a snapshot taken while jbd2 checkpoints can hold a bitmap
    # whose group descriptor checksum is not written home yet; debugfs would refuse to open it
    # (and still exit 0), though the replay that follows makes them agree.
    dump = run(["debugfs", "-c", "-R", "logdump -a", device], check=False)
    home = run(["debugfs", "-c", "-R", "bmap <8> 0", device], check=False)
    if dump.returncode != 0 or home.returncode != 0 or not home.stdout.strip().isdigit():
        return None
    size = int(_field(header, "Block size"))
    blocks, per_group = int(_field(header, "Block count")), int(_field(header, "Blocks per group"))
    first = int(_field(header, "First block"))
    desc = int(_field(header, "Group descriptor size")) if "64bit" in features else 32
    groups = -(-(blocks - first) // per_group)
    gdt_blocks = -(-(groups * desc) // size)
    written = [(0, (first + 1 + gdt_blocks) * size), (int(home.stdout) * size, size)]
    mmp = re.search(r"^MMP block number:\s*(\d+)$", header, re.M)
    if mmp:
        written.append((int(mmp.group(1)) * size, size))
    written.extend((block * size, size) for block in _logged_blocks(dump.stdout))
    return normalize(written)


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
    errors = "error" in state
    return ExtMap(complement(free, 0, fs_bytes), fs_bytes, clean, note, errors)
