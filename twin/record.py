"""`python -m twin.record` (`sudo make twin-record`): record the data plane's real runs that the
diskless twin replays (twin/data_plane_recording.json; twin/recording.py says what is kept).

Each of RUNS is one real twin scenario (loop devices, the dirty disks of `make demo`, no fault):
its source snapshots' blocks, its new snapshots' blocks, each volume's full summary from the
command's standard error and the command's standard output line. Needs root; about 2 minutes.
Run it again whenever sparsecopy's summary changes (test_scenarios.py fails until then).

usage: python -m twin.record [--cdk-out DIR] [--out twin/data_plane_recording.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .context import Context, setup
from .emulator.blockstore import written_chunks
from .emulator.faults import Faults
from .emulator.replay import RECORDING
from .emulator.server import Emulator
from .facts import Run
from .options import REPO, Options
from .recording import raw_summaries, to_ranges
from .scenario import _play

# (INPUT, TARGET) of every run the diskless twin replays: the sweep's inputs with each target
RUNS = (("snapshot", "snapshot"), ("snapshot", "volume"), ("ami", "snapshot"), ("ami", "volume"))


def command_output(logdir: Path) -> tuple[str, str]:
    """(stdout, stderr) of the run's one command (the transfer instance's)."""
    outs = sorted((logdir / "commands").glob("*.stdout"))
    if len(outs) != 1:
        raise SystemExit(f"record: expected one command in {logdir / 'commands'}, found {outs}")
    return outs[0].read_text(), outs[0].with_suffix(".stderr").read_text()


def _devices(ctx: Context) -> dict[str, str]:
    """Snapshot id -> the source AMI's device name of it (INPUT=ami)."""
    if ctx.registered.image_id is None:
        return {}
    image = ctx.emu.boto3_client("ec2").describe_images(ImageIds=[ctx.registered.image_id])
    return {
        m["Ebs"]["SnapshotId"]: m["DeviceName"]
        for m in image["Images"][0]["BlockDeviceMappings"]
        if "Ebs" in m
    }


def _volumes(ctx: Context, ran: Run, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    emu, devices = ctx.emu, _devices(ctx)
    volumes = []
    for index, sid in enumerate(ctx.registered.snapshot_ids):
        (new_id,) = [v["newSnapshotId"] for v in ran.outputs if v["sourceSnapshotId"] == sid]
        volumes.append(
            {
                "device": devices.get(sid),
                "volume_gib": emu.snapshot_file(sid).stat().st_size // 1024**3,
                "source_blocks": to_ranges(written_chunks(emu.snapshot_file(sid))),
                "new_blocks": to_ranges(written_chunks(emu.snapshot_file(new_id))),
                "summary": summaries[index],
            }
        )
    return volumes


def record_run(cdk_out: Path, input_kind: str, target: str, out: Path) -> dict[str, Any]:
    """One real scenario, and what the replay needs of it."""
    opts = Options(input=input_kind, target=target, cdk_out=cdk_out, out_dir=out, picture=False)
    opts.validate()
    work = Path(tempfile.mkdtemp(prefix="twin-record-"))
    logdir = out / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    try:
        with Emulator(work / "emulator", Faults()) as emu:
            ctx = setup(emu, opts, None, work, logdir)
            ran = _play(ctx)
            status = ran.result.status if ran.result else None
            if status != "SUCCEEDED":
                raise SystemExit(f"record: INPUT={input_kind} TARGET={target} ended {status}")
            stdout, stderr = command_output(logdir)
            summaries = raw_summaries(stderr)
            return {"stdout": stdout.strip(), "volumes": _volumes(ctx, ran, summaries)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twin.record", description=__doc__)
    parser.add_argument("--cdk-out", type=Path, default=REPO / "out" / "twin" / "cdk.out")
    parser.add_argument("--out", type=Path, default=RECORDING)
    parser.add_argument("--logs", type=Path, default=REPO / "out" / "record")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("record: the real runs need root (loop devices, mounts)", file=sys.stderr)
        return 2
    runs = {}
    for input_kind, target in RUNS:
        runs[f"{input_kind}/{target}"] = record_run(
            args.cdk_out, input_kind, target, args.logs / f"{input_kind}-{target}"
        )
        print(f"record: INPUT={input_kind} TARGET={target} recorded", flush=True)
    recording = {
        "about": "real data-plane runs the diskless twin replays; regenerate with "
        "`sudo make twin-record` (python -m twin.record), never by hand",
        "runs": runs,
    }
    args.out.write_text(json.dumps(recording, indent=1, sort_keys=True) + "\n")
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
