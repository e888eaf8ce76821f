"""The diskless twin (twin/emulator/replay.py, twin/recording.py): the Command document runs on
the volumes' backing files, the data plane's disk planning replayed from the recording of real
runs (twin/data_plane_recording.json, `sudo make twin-record`).

The recording is checked three ways: against the code that prints the line (here, no disks),
against what a real run prints today (test_scenarios.py, test_direct_snapshot.py: real disks),
and against what the replay prints (here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from devkit.loop import LoopDevices
from twin import recording
from twin.emulator.blockstore import written_chunks
from twin.emulator.replay import RECORD_COMMAND, from_ranges, load, run_of
from twin.scenario import Options, run

REPO = Path(__file__).resolve().parents[2]


def _summary_module() -> Any:
    sys.path.insert(0, str(REPO / "ssm-documents"))
    try:
        from sparsecopy import summary
    finally:
        sys.path.remove(str(REPO / "ssm-documents"))
    return summary


@pytest.mark.parametrize("name", sorted(load()["runs"]))
def test_the_recorded_lines_are_what_todays_summary_code_prints(name: str) -> None:
    """The recorded volumes' summaries, joined by sparsecopy/summary.py as the job joins them,
    give a line of the recorded line's shape: a change of the line fails here until the
    recording is made again."""
    run_ = load()["runs"][name]
    entries = json.loads(run_["stdout"])["volumes"]
    line, _ = _summary_module().join(
        [e["sourceVolumeId"] for e in entries],
        [e["targetVolumeId"] for e in entries],
        [v["summary"] for v in run_["volumes"]],
    )
    assert recording.line_shape(line) == recording.line_shape(run_["stdout"]), (
        f"{name}: the summary line's shape changed; record again with `{RECORD_COMMAND}`"
    )


def test_the_recording_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match="no recorded data-plane run for INPUT=snapshot TARGET=x"):
        run_of(load(), "snapshot", "x")
    with pytest.raises(ValueError, match="twin-record"):
        load(REPO / "no-such-recording.json")
    with pytest.raises(ValueError, match="DISKLESS=1 replays the recorded ext4 disks"):
        Options(fs="xfs", diskless=True).validate()


@pytest.fixture
def no_loop_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """A diskless run attaches no loop device: any attach fails the run."""

    def refuse(*args: object, **kwargs: object) -> str:
        raise AssertionError(f"a diskless run attached a loop device: {args}")

    monkeypatch.setattr(LoopDevices, "attach", refuse)


def diskless(cdk_out: Path, tmp_path: Path, **options: Any) -> dict[str, Any]:
    report = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "out", diskless=True, **options))
    assert report["holds"] is True, (report["leaks"], report["iam_denials"])
    return report


@pytest.mark.parametrize(("input_kind", "target"), [("snapshot", "snapshot"), ("ami", "volume")])
def test_a_diskless_run_copies_the_recorded_blocks(
    cdk_out: Path, tmp_path: Path, no_loop_devices: None, input_kind: str, target: str
) -> None:
    report = diskless(cdk_out, tmp_path, input=input_kind, target=target)
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    recorded = run_of(load(), input_kind, "snapshot")  # the run the source was registered from
    # the new snapshots hold the blocks the recorded copy took, each equal to the source's
    expected = sorted(len(from_ranges(v["new_blocks"])) for v in recorded["volumes"])
    assert sorted(v["blocks_checked"] for v in report["verification"]) == expected
    assert all(v["diskless"] and v["files_verified"] for v in report["verification"])
    assert report["new_snapshot_chunks"] == sum(expected)
    # the program printed today's line, of the recorded shape, and its volumes' full summaries
    assert recording.drift(tmp_path / "out" / "logs", input_kind, target) == []
    if input_kind == "ami":
        assert report["image"]["attributes_equal"] is True, report["image"]
        assert report["new_image_existing"] is True


def test_a_diskless_source_holds_the_recorded_blocks(tmp_path: Path) -> None:
    volume = run_of(load(), "snapshot", "snapshot")["volumes"][0]
    disk = recording.build_source(tmp_path / "source.img", volume, "seed")
    assert written_chunks(disk.path) == set(from_ranges(volume["source_blocks"]))
    assert disk.size == volume["volume_gib"] * 1024**3


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        # the program's own error line: the source volume has no device on the instance
        ("command-fails", "is not attached to this instance"),
        # every put refused by its checksum: the program never completes the snapshot
        ("put-corrupted", "NOT completed"),
    ],
)
def test_faults_of_the_command_fail_it_as_on_disks(
    cdk_out: Path, tmp_path: Path, no_loop_devices: None, fault: str, cause: str
) -> None:
    report = diskless(cdk_out, tmp_path, fault=fault)
    assert report["execution_status"] == "FAILED"
    assert report["error"] == "CompactionFailed" and cause in report["cause"], report["cause"]
