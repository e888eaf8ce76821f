"""The workflow end to end on the twin: happy paths and every fault of issue #4.

On real disks: the CLI's runs of both targets and the other filesystems (here), an AMI of each
target (test_direct_snapshot.py, test_debian_boot.py); the faults of the control plane run
diskless, each in seconds (the sweep's way: what they prove is about the workflow, the Lambdas
and the emulator's resources, not the bytes copied).

Each scenario synthesizes nothing itself: it runs against the cloud assembly in TWIN_CDK_OUT
(`make test-twin` synthesizes it once) or synthesizes one into a temporary directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twin.emulator.faults import FaultError
from twin.recording import drift
from twin.scenario import Options, run

REPO = Path(__file__).resolve().parents[2]
# the default input's path: target snapshot (start_compaction starts the new snapshots, the
# transfer instance writes them; no create_snapshots)
HAPPY_HANDLERS = [
    "prepare",
    "list_source_blocks",
    "launch",
    "check_instance",
    "attach_volumes",
    "start_compaction",
    "check_compaction",
    "check_snapshots",
    "teardown",
    "report",
]
# target volume: target volumes, then CreateSnapshot
VOLUME_HANDLERS = [*HAPPY_HANDLERS[:7], "create_snapshots", *HAPPY_HANDLERS[7:]]


def scenario(cdk_out: Path, tmp_path: Path, **options: Any) -> dict[str, Any]:
    """A fault of the control plane runs diskless (the data plane replayed from its recording:
    twin/emulator/replay.py); what is about the bytes (filesystems, the CLI's runs) passes
    `diskless=False` and copies real disks."""
    options.setdefault("diskless", True)
    report = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "out", **options))
    # What every scenario must leave behind: nothing, and the source as it was; once delivered,
    # the new snapshots still exist (the sweep's invariants).
    assert report["leaked_resources"] == 0, report["leaks"]
    assert report["source_snapshot_unchanged"] is True
    assert report["holds"] is True, report
    return report


def assert_compacted(report: dict[str, Any]) -> None:
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    assert report["files_verified"] is True, report["verification"]
    assert report["fsck_clean"] is True, report["verification"]
    assert 0 < report["new_snapshot_chunks"] < report["source_snapshot_chunks"]
    assert report["bytes_read_from_source"] > 0


@pytest.mark.parametrize("target", ["", "volume"])
def test_demo_cli_compacts_a_dirty_ext4_snapshot(cdk_out: Path, tmp_path: Path, target) -> None:
    """make demo (TARGET empty: the workflow's default, snapshot) and make demo TARGET=volume."""
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "twin.demo", "--cdk-out", str(cdk_out), "--out", str(out),
         "--target", target],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert_compacted(report)
    assert report["leaked_resources"] == 0 and report["source_snapshot_unchanged"] is True
    assert report["iam_denials"] == [] and report["holds"] is True
    assert report["target"] == (target or "snapshot")
    assert f"target           {target or 'snapshot'} (" in proc.stdout
    assert report["handlers_called"] == (VOLUME_HANDLERS if target else HAPPY_HANDLERS)
    # Every state entered was left again, each with its duration.
    assert len(report["state_durations"]) == len(report["states_visited"]) > len(HAPPY_HANDLERS)
    assert all(d["seconds"] >= 0 for d in report["state_durations"])
    assert "SUCCEEDED" in proc.stdout and "files equal: True" in proc.stdout
    svg = (out / "blocks.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > report["new_snapshot_chunks"]
    # what the diskless twin replays is still what the data plane prints (test_diskless.py)
    assert drift(out / "logs", "snapshot", target or "snapshot") == []


@pytest.mark.parametrize("fs", ["xfs", "ntfs", "bare-ext4"])
def test_other_filesystems(cdk_out: Path, tmp_path: Path, fs: str) -> None:
    report = scenario(cdk_out, tmp_path, fs=fs, diskless=False)
    assert_compacted(report)


def test_ami_becomes_an_equivalent_ami_with_fast_snapshot_restore(cdk_out, tmp_path) -> None:
    report = scenario(cdk_out, tmp_path, input="ami")
    assert_compacted(report)
    assert len(report["verification"]) == 2
    image = report["image"]
    assert image["new_image_id"], report["workflow_report"]
    assert image["attributes_equal"] is True, image["attribute_differences"]
    # The workflow turns FSR on and reports; reaching "enabled" takes AWS a while longer.
    assert len(image["fsr"]) == 2
    assert {f["state"] for f in image["fsr"]} <= {"enabling", "optimizing", "enabled"}
    assert {f["zone"] for f in image["fsr"]} == {"us-east-1a"}
    assert {f["snapshotId"] for f in image["fsr"]} == set(report["new_snapshot_ids"])
    assert "register_image" in report["handlers_called"]
    assert "enable_fast_snapshot_restore" in report["handlers_called"]


def test_tagging_a_pending_snapshot_starts_one_compaction_per_tag_value(cdk_out, tmp_path) -> None:
    report = scenario(cdk_out, tmp_path, trigger="tag")
    assert_compacted(report)
    source = report["source_snapshot_ids"][0]
    assert report["execution_input"]["snapshotId"].endswith(source)
    # The source was still pending when tagged: the workflow waited for it.
    assert report["states_visited"].count("Prepare") >= 2
    trigger = report["trigger"]
    # EventBridge delivers at least once: the twin delivered the event twice, one execution ran.
    assert trigger["events"] == 1 and len(trigger["deliveries"]) == 2
    assert trigger["executions_started"] == 1
    assert trigger["second_delivery_no_op"] is True
    assert report["retriggered_executions"] == 0


def test_spot_capacity_errors_fall_back_to_another_pool(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="spot-capacity")
    assert_compacted(report)
    assert report["spot_capacity_errors"] == 2
    assert report["instances_launched"] == 1


def test_no_capacity_fails_with_no_spot_capacity(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="no-capacity")
    assert report["execution_status"] == "FAILED"
    assert report["error"] == "NoSpotCapacity"
    assert report["instances_launched"] == 0
    assert report["spot_capacity_errors"] > 1
    assert report["handlers_called"][-2:] == ["teardown", "report"]


def test_failing_command_fails_with_the_programs_error_line(cdk_out, tmp_path) -> None:
    report = scenario(cdk_out, tmp_path, fault="command-fails")
    assert report["execution_status"] == "FAILED"
    assert report["error"] == "CompactionFailed"
    cause = json.loads(report["cause"])
    # The source volume has no device node: the error line says so, and names the started
    # snapshot it did not complete (target snapshot)
    message = cause["errorMessage"]
    assert message.startswith("sparsecopy: error: snapshot snap-"), cause
    assert "NOT completed" in message and "volume vol-" in message, cause
    assert "not attached" in message
    # start_compaction started the new snapshot before the command; teardown deleted it
    assert len(report["new_snapshot_ids"]) == 1 and report["new_snapshot_ids_existing"] == []
    assert report["delivered_snapshot_ids"] == []


def test_lost_instance_is_replaced_and_the_job_succeeds(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="instance-lost")
    assert_compacted(report)
    assert report["instances_launched"] == 2
    calls = report["handlers_called"]
    assert calls.count("launch") == 2
    assert calls.index("teardown") < len(calls) - 2  # a retry teardown before the relaunch


@pytest.mark.parametrize("target", ["volume", "snapshot"])
def test_snapshot_error_fails_with_snapshot_failed(cdk_out, tmp_path, target) -> None:
    """target snapshot: the direct snapshot turns `error` after CompleteSnapshot, while the
    job's --verify still waits for its seal: check_compaction sees it and fails SnapshotFailed."""
    report = scenario(cdk_out, tmp_path, fault="snapshot-error", target=target)
    assert report["execution_status"] == "FAILED"
    assert report["error"] == "SnapshotFailed"
    # the failed (undelivered) snapshot was made, then deleted by the failure chain
    assert report["delivered"] is False
    assert len(report["new_snapshot_ids"]) == 1
    assert report["new_snapshots_existing"] == 0


def test_throttled_lambdas_are_retried(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="throttle")
    assert_compacted(report)
    functions_called = len(set(report["handlers_called"]))
    assert report["throttled_invocations"] == 2 * functions_called


def test_bad_input_fails_with_the_specific_error_and_creates_nothing(cdk_out, tmp_path) -> None:
    report = scenario(cdk_out, tmp_path, fault="bad-input")
    cases = {c["case"]: c for c in report["bad_input_cases"]}
    # twin/bad_inputs.py: one case per refusal, each registered in the emulator
    assert {c["expected_error"] for c in cases.values()} == {
        "SnapshotNotFound", "InvalidInput", "SnapshotArchived", "UnsupportedImage",
        "SnapshotNotCompleted",
    }  # fmt: skip
    for case in cases.values():
        assert case["execution_status"] == "FAILED", case
        assert case["error"] == case["expected_error"], case
        assert case["created_nothing"] is True, case
        assert case["leaked_resources"] == 0
    assert report["instances_launched"] == 0


# --- the fault grammar: KIND@STATE ----------------------------------------------------------


def test_error_after_delivery_keeps_the_new_snapshots(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="error@Report")
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    assert report["fault_applied"]["applied"] is True
    assert report["outcome"] == "succeeded-with-warnings"
    assert report["delivered"] is True
    assert report["new_snapshots_existing"] == 1
    assert "TwinInjectedError" in json.dumps(report["workflow_report"])


def test_abort_while_launching_is_cleaned_up_by_the_cleanup_workflow(cdk_out, tmp_path) -> None:
    report = scenario(cdk_out, tmp_path, fault="abort@Launch transfer instance")
    assert report["execution_status"] == "ABORTED"
    # The launch call in flight finished (RunInstances landed after the abort) ...
    assert report["instances_launched"] == 1
    # ... and the cleanup state machine, started by the rule on ABORTED, removed it.
    assert report["cleanup"] == "SUCCEEDED", report["cleanup_runs"]
    assert report["cleanup_runs"][0]["kind"] == "state machine"


def test_throttled_poll_calls_are_not_done_yet(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="throttle@Check instance")
    assert_compacted(report)
    assert report["throttled_requests"] == {"Check instance": 8}


def test_instance_lost_in_any_state_is_relaunched(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault="lost@Check compaction")
    assert_compacted(report)
    assert "terminated" in report["fault_applied"]["detail"]
    assert report["instances_launched"] == 2
    # each attempt started its own snapshot; teardown before the relaunch deleted the first
    assert len(report["new_snapshot_ids"]) == 2, report["new_snapshot_ids"]
    assert report["delivered_snapshot_ids"] == report["new_snapshot_ids_existing"]
    assert len(report["delivered_snapshot_ids"]) == 1


def test_a_fault_at_an_unknown_state_names_the_task_states(cdk_out: Path, tmp_path: Path) -> None:
    with pytest.raises(FaultError, match=r"Task states are: .*Launch transfer instance"):
        run(Options(cdk_out=cdk_out, out_dir=tmp_path / "out", fault="error@Nowhere"))
