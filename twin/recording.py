"""The diskless twin's recording of real data-plane runs (twin/data_plane_recording.json).

`python -m twin.record` (twin/record.py) runs the real scenarios on loop devices and keeps, per
INPUT and TARGET, what the diskless mode replays: the source snapshots' written 512 KiB blocks,
the blocks of the new snapshots, each volume's full summary as the data plane logged it (its
partitions' plans: table, offsets, filesystem, method, note, fsck) and the standard output line
the Command document printed. A diskless run (`make demo DISKLESS=1`, `python -m twin.sweep
--diskless`) registers sources holding those blocks (deterministic bytes, no filesystem) and, on
the "transfer instance", runs the fetched data-plane program itself with only its planning of
each disk replayed from the recording (twin/emulator/replay_program.py): the copy, the EBS
direct puts, CompleteSnapshot, the verification and the summary line are today's code.

shape() is what must not drift: the recorded line's shape against what a real run prints today
(test_scenarios.py) and against what the replay prints (test_diskless.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from devkit.disks import DiskImage
from devkit.disks.layout import create_sparse

from .emulator.blockstore import EBS_BLOCK, written_chunks
from .emulator.replay import (
    RECORD_COMMAND,
    SOURCE_TARGET,
    NotRecorded,
    from_ranges,
    load,
    run_of,
)
from .emulator.server import Emulator
from .options import Options

GIB = 1024**3
# "sparsecopy: summary of volume 1/2 vol-... -> snap-...: {...}" and "... partition 3: {...}"
_DETAIL = re.compile(
    r"^sparsecopy: summary of volume (?P<index>\d+)/(?P<count>\d+) \S+ -> \S+"
    r"(?: partition (?P<partition>\d+))?: (?P<json>\{.*\})$"
)
SOURCE_TAGS = {"Name": "twin-demo", "team": "storage"}


# --- block lists as ranges -------------------------------------------------------------------


def to_ranges(blocks: set[int] | list[int]) -> list[list[int]]:
    """[[first, count], ...] of sorted block indexes (the recording stays small)."""
    out: list[list[int]] = []
    for index in sorted(blocks):
        if out and out[-1][0] + out[-1][1] == index:
            out[-1][1] += 1
        else:
            out.append([index, 1])
    return out


# --- what a real run logged --------------------------------------------------------------------


def raw_summaries(stderr: str) -> list[dict[str, Any]]:
    """Each volume's full summary (totals and partitions) from the data plane's standard error
    (sparsecopy/summary.py details()), in volume order."""
    volumes: dict[int, dict[str, Any]] = {}
    for line in stderr.splitlines():
        m = _DETAIL.match(line.strip())
        if not m:
            continue
        entry = volumes.setdefault(int(m.group("index")) - 1, {"partitions": []})
        value = json.loads(m.group("json"))
        if m.group("partition") is None:
            entry.update(value)
        else:
            entry["partitions"].append(value)
    return [volumes[i] for i in sorted(volumes)]


def shape(value: Any) -> Any:
    """The JSON shape of a value: keys (sorted) with the shapes of their values, lists by the
    shapes of their items, scalars by type (int and float are both numbers)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        shapes: list[Any] = []
        for item in value:
            if shape(item) not in shapes:
                shapes.append(shape(item))
        return shapes
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def line_shape(line: str) -> Any:
    """shape() of the Command document's standard output line."""
    return shape(json.loads(line))


# --- a diskless source -------------------------------------------------------------------------


def block_bytes(seed: str, index: int) -> bytes:
    """Deterministic, never all-zero bytes of one source block (no filesystem: nothing reads it
    as one; the replayed plan says which blocks a copy takes)."""
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return (digest * (EBS_BLOCK // len(digest)))[:EBS_BLOCK]


def build_source(path: Path, volume: dict[str, Any], seed: str) -> DiskImage:
    """A sparse disk of the recorded size holding exactly the recorded source blocks."""
    size = int(volume["volume_gib"]) * GIB
    create_sparse(path, size)
    with open(path, "r+b") as f:
        for index in from_ranges(volume["source_blocks"]):
            f.seek(index * EBS_BLOCK)
            f.write(block_bytes(seed, index))
    return DiskImage(path, size, "none", [])


def register_sources(
    emu: Emulator, opts: Options, work: Path
) -> tuple[list[str], list[DiskImage], str | None]:
    """The diskless sources: INPUT=snapshot one snapshot, INPUT=ami an image of the recorded
    volumes (the AMI attributes of source.py). (snapshot ids, disks, image id); the emulator
    learns which recorded volume each snapshot is (EmulatorState.replay_sources)."""
    from .source import AMI_ATTRIBUTES

    if opts.fs != "ext4" or opts.os != "none":
        raise NotRecorded(
            f"the diskless twin replays the recorded ext4 disks only (FS={opts.fs}, OS={opts.os}):"
            " run this scenario without DISKLESS"
        )
    run = run_of(load(), opts.input, SOURCE_TARGET)
    disks = [
        build_source(work / f"source-{i}.img", volume, f"{opts.seed}:{i}")
        for i, volume in enumerate(run["volumes"])
    ]
    if opts.input == "snapshot":
        pending = opts.trigger == "tag"
        sid = emu.register_snapshot(
            disks[0].path, "twin demo: a dirty disk (diskless)", dict(SOURCE_TAGS),
            state="pending" if pending else "completed", completes=True,
        )  # fmt: skip
        sids, image_id = [sid], None
    else:
        devices = [str(v["device"]) for v in run["volumes"]]
        image_id, sids = emu.register_ami(
            "twin-demo-image", list(zip(devices, [d.path for d in disks], strict=True)),
            dict(AMI_ATTRIBUTES),
        )  # fmt: skip
        emu.boto3_client("ec2").create_tags(
            Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in SOURCE_TAGS.items()]
        )
    for index, sid in enumerate(sids):
        emu.state.replay_sources[sid] = (opts.input, index)
    return sids, disks, image_id


def verify_blocks(source: Path, new: Path) -> dict[str, Any]:
    """Diskless: every block of the new snapshot holds the source's bytes at that index (there
    are no filesystems to compare or check)."""
    blocks = sorted(written_chunks(new))
    problems = []
    with open(source, "rb") as src, open(new, "rb") as dst:
        for index in blocks:
            src.seek(index * EBS_BLOCK)
            dst.seek(index * EBS_BLOCK)
            if src.read(EBS_BLOCK) != dst.read(EBS_BLOCK):
                problems.append(f"block {index} differs from the source's")
    return {
        "diskless": True,
        "blocks_checked": len(blocks),
        "files_checked": 0,
        "files_verified": bool(blocks) and not problems,
        "fsck_clean": bool(blocks) and not problems,
        "problems": problems[:10],
    }


def drift(logdir: Path, input_kind: str, target: str) -> list[str]:
    """How the command output a run left in `logdir` (logs/commands/, one command) differs in
    shape from the recorded run of INPUT/TARGET: its standard output line, and each volume's
    full summary on standard error. [] when the recording is current."""
    outs = sorted((logdir / "commands").glob("*.stdout"))
    if len(outs) != 1:
        return [f"expected one command's output in {logdir / 'commands'}, found {outs}"]
    stdout, stderr = outs[0].read_text().strip(), outs[0].with_suffix(".stderr").read_text()
    recorded = run_of(load(), input_kind, target)
    problems = []
    if line_shape(stdout) != line_shape(recorded["stdout"]):
        problems.append(f"the standard output line: {line_shape(stdout)} was recorded as "
                        f"{line_shape(recorded['stdout'])}")  # fmt: skip
    summaries = [shape(s) for s in raw_summaries(stderr)]
    was = [shape(v["summary"]) for v in recorded["volumes"]]
    if summaries != was:
        problems.append(f"the volumes' summaries on standard error: {summaries} were recorded "
                        f"as {was}")  # fmt: skip
    return [
        f"the data plane's output no longer has the recorded shape (INPUT={input_kind} "
        f"TARGET={target}): {p}; record it again with `{RECORD_COMMAND}`"
        for p in problems
    ]
