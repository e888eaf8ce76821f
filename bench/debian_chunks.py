"""The real Debian disk of devkit/debian: what sparsecopy stores of its crash-consistent snapshot,
and which stored chunks are all zeros (what issue #19's rule costs on a real OS disk, and why).

Usage (root): python -m devkit.debian --out out/bench-debian   # the disk and its snapshot
              python -m bench.debian_chunks out/bench-debian/snapshot.img LABEL=PROGRAM_DIR ...
Each program (a copy of ssm-documents/sparsecopy, e.g. one `git archive` per commit) copies a
fresh copy of the same snapshot (it replays the journal on its source) with the snapshot's block
list, as the workflow does. Printed: the lower bound (held and needed, bench/allocation.py on
the replayed source) and its all-zero chunks by owner; per program the chunks stored, those all
zeros (by owner) and the lower-bound chunks left absent. An owner is a file (debugfs
icheck/ncheck, grouped by directory), ext4 metadata (inode tables, bitmaps, descriptors) or a
partition without a filesystem reader.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.allocation import allocation
from bench.blocks import held_needed_chunks, write_block_list
from bench.disk import Layout, Part, blank_image, sfdisk_parts
from bench.methods import Job, fsync_device, sparsecopy
from bench.system import BenchError, Resources, run
from devkit import markdown
from devkit.chunks import (
    CHUNK,
    Extent,
    copy_image,
    nonzero_chunks,
    split_by_chunk,
    written_chunks,
)

# devkit/debian/disk.py: 1 BIOS boot, 2 ESP (FAT32: no reader here, needed whole), 3 ext4 root
KINDS = ["raw", "raw", "ext4"]
PART_NAMES = {1: "BIOS-boot partition (GRUB core.img)", 2: "ESP (FAT32)"}
METADATA = {
    "Inode table": "ext4 inode tables",
    "Block bitmap": "ext4 block bitmaps",
    "Inode bitmap": "ext4 inode bitmaps",
    "Group descriptors": "ext4 group descriptors",
    "Reserved GDT blocks": "ext4 reserved GDT blocks",
    "superblock": "ext4 superblocks",
}
SAMPLES = 16  # blocks per chunk whose owner is looked up (debugfs icheck is slow on many)
SPECIAL_INODES = {7: "ext4 resize inode", 8: "ext4 journal (inode 8)"}


@dataclass
class Result:
    label: str
    summary: dict[str, Any]
    chunks: int
    zero_chunks: int
    needed_absent: int
    outside_held: int
    zero_owners: dict[str, int]


def ext4_metadata(dumpe2fs_text: str) -> list[tuple[int, int, str]]:
    """(first block, last block, name) of the ext4 metadata no inode owns, from dumpe2fs."""
    found = []
    pattern = rf"({'|'.join(METADATA)}) at (\d+)(?:-(\d+))?"
    for name, first, last in re.findall(pattern, dumpe2fs_text):
        found.append((int(first), int(last or first), METADATA[name]))
    return found


def block_owners(device: str, blocks: list[int]) -> dict[int, int]:
    """fs block -> owning inode, for the blocks some inode owns (debugfs icheck)."""
    if not blocks:
        return {}
    out = run(["debugfs", "-R", "icheck " + " ".join(map(str, blocks)), device])
    owners = {}
    for block, inode in re.findall(r"^(\d+)\s+(\d+)\s*$", out, flags=re.MULTILINE):
        owners[int(block)] = int(inode)
    return owners


def inode_paths(device: str, inodes: set[int]) -> dict[int, str]:
    regular = sorted(i for i in inodes if i not in SPECIAL_INODES)
    if not regular:
        return {}
    out = run(["debugfs", "-R", "ncheck " + " ".join(map(str, regular)), device])
    return {int(i): p for i, p in re.findall(r"^(\d+)\s+(/\S*)\s*$", out, flags=re.MULTILINE)}


def directory_of(path: str) -> str:
    """Files grouped by their first two directories: /var/log/journal/x -> /var/log/."""
    parts = path.strip("/").split("/")
    return "/" + "/".join(parts[:2]) + ("/" if len(parts) > 2 else "")


def ext4_zero_owners(
    device: str, root: Part, chunks: set[int], needed: list[Extent]
) -> Counter[str]:
    """The owners of the needed blocks of the all-zero `chunks` inside the ext4 `root` (up to
    SAMPLES blocks per chunk, evenly spaced), counted once per chunk and owner; a chunk without
    a needed block is counted under "not needed: " and the owners of its blocks."""
    text = run(["dumpe2fs", device])
    size = re.search(r"^Block size:\s+(\d+)", text, flags=re.MULTILINE)
    if size is None:
        raise BenchError(f"dumpe2fs {device} printed no block size")
    block_size = int(size[1])
    metadata = ext4_metadata(text)
    per_chunk: dict[int, list[int]] = {}
    inside = [
        (max(s, root.start), min(s + n, root.start + root.size) - max(s, root.start))
        for s, n in needed
    ]
    wanted = [(s, n) for s, n in inside if n > 0]
    for chunk, (start, length) in split_by_chunk(wanted):
        if chunk in chunks:
            first = (start - root.start) // block_size
            last = (start + length - 1 - root.start) // block_size
            per_chunk.setdefault(chunk, []).extend(range(first, last + 1))
    # a stored chunk with no needed byte (by bench/allocation.py): every block of it, so that
    # its owner is named too ("not needed: ...")
    for chunk in chunks - per_chunk.keys():
        first = (chunk * CHUNK - root.start) // block_size
        per_chunk[-1 - chunk] = list(range(first, first + CHUNK // block_size))
    for chunk, blocks in per_chunk.items():
        step = max(1, len(blocks) // SAMPLES)
        per_chunk[chunk] = blocks[::step]
    every = sorted({b for blocks in per_chunk.values() for b in blocks})
    owners = block_owners(device, every)
    paths = inode_paths(device, set(owners.values()))
    counts: Counter[str] = Counter()
    for chunk, blocks in per_chunk.items():
        names = set()
        for block in blocks:
            inode = owners.get(block)
            if inode is not None:
                names.add(
                    SPECIAL_INODES.get(inode) or directory_of(paths.get(inode, f"<inode {inode}>"))
                )
                continue
            meta = next((name for first, last, name in metadata if first <= block <= last), None)
            names.add(meta or "ext4 other metadata")
        counts.update(f"not needed: {n}" if chunk < 0 else n for n in names)
    return counts


def zero_owners(
    image: Path, parts: list[Part], zero: set[int], needed: list[Extent], res: Resources
) -> dict[str, int]:
    counts: Counter[str] = Counter()
    rest = set(zero)
    for part in parts:
        first, last = part.start // CHUNK, (part.start + part.size - 1) // CHUNK
        mine = {c for c in rest if first <= c <= last}
        rest -= mine
        if not mine:
            continue
        if part.kind == "ext4":
            device = res.attach(image, offset=part.start, size=part.size, read_only=True)
            try:
                counts += ext4_zero_owners(device, part, mine, needed)
            finally:
                res.detach(device)
        else:
            counts[PART_NAMES.get(part.number, f"partition {part.number}")] += len(mine)
    if rest:
        counts["partition table and gaps"] += len(rest)
    return dict(counts.most_common())


def copy_with(program: Path, label: str, snapshot: Path, work: Path, res: Resources) -> Result:
    """Copy a fresh copy of `snapshot` with `program` and the snapshot's block list, as the
    workflow does; the replayed source stays in work/source.img, the copy in work/target.img."""
    source, target, blocks = work / "source.img", work / "target.img", work / "blocks.json"
    copy_image(snapshot, source)
    write_block_list(snapshot, blocks)
    blank_image(target, snapshot.stat().st_size)
    table, parts = sfdisk_parts(source, KINDS)
    layout = Layout(table, source.stat().st_size, tuple(parts))
    src, dst = res.attach(source), res.attach(target)
    try:
        job = Job(src, dst, layout, work, work / "mnt", work / f"{label}.log", None, res, program)
        summary = sparsecopy(replace(job, block_list=blocks), with_blocks=True) or {}
        fsync_device(dst)
    finally:
        res.detach(dst)
        res.detach(src)
    return Result(label, summary, 0, 0, 0, 0, {})


def measure(snapshot: Path, programs: list[tuple[str, Path]], work: Path) -> dict[str, Any]:
    """Copy the snapshot with each program; the needed ranges come from the first program's
    replayed source (every program replays the same journal)."""
    res = Resources()
    held = written_chunks(snapshot)
    results: list[Result] = []
    bounds: dict[str, Any] = {}
    try:
        for label, program in programs:
            result = copy_with(program, label, snapshot, work, res)
            source, target = work / "source.img", work / "target.img"
            table, parts = sfdisk_parts(source, KINDS)
            alloc = allocation(source, Layout(table, source.stat().st_size, tuple(parts)), res)
            lower = held_needed_chunks(held, alloc.extents)
            zero_bound = lower - nonzero_chunks(source, alloc.extents)
            bounds = {"held": len(held), "lower_bound": len(lower)}
            bounds["nonzero_bound"] = len(lower) - len(zero_bound)
            bounds["zero_bound_owners"] = zero_owners(source, parts, zero_bound, alloc.extents, res)
            chunks = written_chunks(target)
            zero = chunks - nonzero_chunks(target)
            result.chunks, result.zero_chunks = len(chunks), len(zero)
            result.needed_absent, result.outside_held = len(lower - chunks), len(chunks - held)
            result.zero_owners = zero_owners(source, parts, zero, alloc.extents, res)
            results.append(result)
    finally:
        for problem in res.close():
            print(f"debian_chunks: clean-up problem: {problem}", file=sys.stderr)
    return {"snapshot": str(snapshot), **bounds, "results": [asdict(r) for r in results]}


def render(document: dict[str, Any]) -> str:
    lines = [
        f"snapshot {document['snapshot']}: held {document['held']} chunks, lower bound (held "
        f"and needed) {document['lower_bound']}, of them with a non-zero needed byte "
        f"{document['nonzero_bound']}; the all-zero ones by owner: "
        + (", ".join(f"{k} {v}" for k, v in document["zero_bound_owners"].items()) or "none"),
        "",
        markdown.table(
            ["program", "chunks stored", "all zeros", "lower-bound chunks absent", "not held"],
            [
                [
                    r["label"],
                    f"{r['chunks']:,}",
                    f"{r['zero_chunks']:,}",
                    f"{r['needed_absent']:,}",
                    f"{r['outside_held']:,}",
                ]
                for r in document["results"]
            ],
        ),
    ]
    for r in document["results"]:
        owners = ", ".join(f"{name} {count}" for name, count in r["zero_owners"].items())
        lines.append(f"\n{r['label']}: all-zero chunks stored, by owner: {owners or 'none'}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or any("=" not in a for a in args[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    snapshot = Path(args[0])
    work = snapshot.parent / "chunks"
    shutil.rmtree(work, ignore_errors=True)
    (work / "mnt").mkdir(parents=True)
    programs = [(label, Path(d)) for label, d in (a.split("=", 1) for a in args[1:])]
    try:
        document = measure(snapshot, programs, work)
    except BenchError as err:
        print(f"debian_chunks: {err}", file=sys.stderr)
        return 1
    (snapshot.parent / "chunks.json").write_text(json.dumps(document, indent=2) + "\n")
    print(render(document), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
