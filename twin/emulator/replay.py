"""Diskless Run Command (Emulator(diskless=True)): the transfer instance's volumes are their
backing files, and the data-plane program plans each disk from a recording of a real run.

The Command document runs unchanged: its script fetches the program with the presigned URL,
checks the pinned SHA-256 and starts `python3 sparsecopy.pyz job ...`. Only that start is
diverted (a `python3` first on the command's PATH) to replay_program.py, which runs the fetched
program with its disk planning replayed (the partitions and the blocks the recorded copy took)
and its devices being the volumes' backing files: no loop device, no mount, no filesystem tool.
Everything after the plan is the program's own code: the copy onto the target volume's file or
the EBS direct puts into the started snapshot (as the instance role), CompleteSnapshot, the
verification, the summary line and the error lines. The recording (twin/data_plane_recording.json)
comes from `python -m twin.record` (twin/record.py); twin/recording.py registers the sources.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

RECORDING = Path(__file__).resolve().parents[1] / "data_plane_recording.json"
RECORD_COMMAND = "sudo make twin-record"  # python -m twin.record: regenerates RECORDING
PROGRAM = Path(__file__).resolve().with_name("replay_program.py")
PLAN_FILE = "replay-plan.json"
# the recorded run of each INPUT whose source blocks (and copied blocks) a diskless source holds
SOURCE_TARGET = "snapshot"
_WRAPPER = """#!/bin/bash
# twin, diskless: the Command document's `python3 sparsecopy.pyz ...` runs the fetched program
# with its disk planning replayed (twin/emulator/replay.py); anything else is plain python3.
case "${1:-}" in
  *.pyz) exec "$TWIN_REPLAY_PYTHON" "$TWIN_REPLAY_PROGRAM" "$@" ;;
esac
exec "$TWIN_REPLAY_PYTHON" "$@"
"""


class NotRecorded(ValueError):
    """The recording has no run for what a diskless scenario asks."""


def load(path: Path = RECORDING) -> dict[str, Any]:
    if not path.exists():
        raise NotRecorded(f"{path} is missing: record it with `{RECORD_COMMAND}`")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def run_of(recording: dict[str, Any], input_kind: str, target: str) -> dict[str, Any]:
    """The recorded run of INPUT=input_kind with the copy's target (snapshot or volume)."""
    runs = recording.get("runs", {})
    name = f"{input_kind}/{target}"
    if name not in runs:
        raise NotRecorded(
            f"the diskless twin has no recorded data-plane run for INPUT={input_kind} "
            f"TARGET={target} (recorded: {sorted(runs)}); add it to twin/record.py's RUNS and "
            f"run `{RECORD_COMMAND}`"
        )
    run: dict[str, Any] = runs[name]
    return run


def from_ranges(ranges: list[list[int]]) -> list[int]:
    """Block indexes of the recording's [[first, count], ...]."""
    return [first + i for first, count in ranges for i in range(count)]


def plan_for(sources: dict[str, tuple[str, int]], snapshot_id: str | None,
             target: str) -> dict[str, Any] | None:  # fmt: skip
    """What the replayed program plans for a volume restored from `snapshot_id`: the recorded
    table and partitions of the run with this target (their fsck results differ by target) and
    the blocks the copy took in the run the source was registered from (INPUT with target
    snapshot: real disks differ in layout from one build to the next). None: the snapshot is
    not a diskless source."""
    if snapshot_id is None or snapshot_id not in sources:
        return None
    input_kind, index = sources[snapshot_id]
    recording = load()
    summary = run_of(recording, input_kind, target)["volumes"][index]["summary"]
    copied = run_of(recording, input_kind, SOURCE_TARGET)["volumes"][index]["new_blocks"]
    return {
        "table": summary.get("table"),
        "partitions": summary.get("partitions") or [],
        "new_blocks": copied,
    }


def write_plans(rundir: Path, plans: dict[str, dict[str, Any]]) -> Path:
    """The plans by the real path of each source volume's file (what the program opens)."""
    path = rundir / PLAN_FILE
    path.write_text(json.dumps(plans))
    return path


def environment(rundir: Path, path_env: str, plans: Path) -> dict[str, str]:
    """PATH with the diverting `python3` first, and what it needs."""
    bin_dir = rundir / "replay-bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "python3"
    wrapper.write_text(_WRAPPER)
    wrapper.chmod(0o755)
    python = shutil.which("python3", path=path_env)
    if python is None:
        raise RuntimeError("diskless twin: no python3 on PATH to run the data-plane program")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{path_env}",
        "TWIN_REPLAY_PYTHON": python,
        "TWIN_REPLAY_PROGRAM": str(PROGRAM),
        "TWIN_REPLAY_PLAN": str(plans),
    }
