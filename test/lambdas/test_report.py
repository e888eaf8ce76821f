from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from compactor import aws
from compactor.errors import TransientAwsError
from compactor.handlers import report
from compactor.report import events
from compactor.report.build import phase_seconds
from conftest import EXECUTION, World
from support import amend, capture, error_response, respond

TIMINGS = {
    "start": "2026-11-21T10:00:00.000Z",
    "prepare": "2026-11-21T10:00:00.500Z",
    "launch": "2026-11-21T10:00:02Z",
    "waitReady": "2026-11-21T10:00:10.000Z",
    "compaction": "2026-11-21T10:01:10.000Z",
    "snapshot": "2026-11-21T10:11:10.000Z",
    "teardown": "2026-11-21T10:20:00.000Z",
    "report": "2026-11-21T10:20:30.000Z",
}
NOTE = (
    "snap-0 is encrypted with a key of account 111122223333: the new snapshot uses this "
    "account's EBS default key"
)


def test_phase_seconds_run_from_each_start_to_the_next() -> None:
    timings = {k: datetime.fromisoformat(v.replace("Z", "+00:00")) for k, v in TIMINGS.items()}
    now = datetime(2026, 11, 21, 10, 20, 31, tzinfo=UTC)
    assert phase_seconds(timings, now) == {
        "prepare": 1.5,
        "launch": 8.0,
        "waitReady": 60.0,
        "compaction": 600.0,
        "snapshot": 530.0,
        "teardown": 30.0,
        "report": 1.0,
    }


def success_state(world: World) -> dict[str, Any]:
    source = world.snapshot()
    volume_id = world.ec2.create_volume(Size=8, AvailabilityZone=world.azs[0])["VolumeId"]
    new = world.ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"]
    return {
        "input": {"snapshotId": source},
        "executionName": EXECUTION,
        "launchAttempt": 1,
        "timings": TIMINGS,
        "plan": {
            "executionName": EXECUTION,
            "source": {"kind": "snapshot", "snapshotId": source},
            "volumes": [
                {
                    "index": 0,
                    "sourceSnapshotId": source,
                    "deviceName": None,
                    "sizeGiB": 8,
                    "encrypted": False,
                    "kmsKeyId": None,
                    "sourceFullSizeBytes": 8_589_934_592,
                }
            ],
            "notes": [NOTE],
            "target": "volume",
        },
        "attached": {
            "done": True,
            "volumes": [{"index": 0, "sourceVolumeId": "vol-s", "targetVolumeId": "vol-t"}],
        },
        "compaction": {
            "done": True,
            "status": "Success",
            "summary": {
                "volumes": [
                    {
                        "sourceVolumeId": "vol-s",
                        "targetVolumeId": "vol-t",
                        "source_bytes_read": 3_000_000_000,
                        "target_bytes_written": 2_000_000_000,
                        "held_blocks": 6_000,
                        "held_blocks_read": 5_800,
                        "sourceConsistent": True,
                        "verified": True,
                    }
                ]
            },
        },
        "sourceBlocks": {
            "complete": True,
            "bundleKey": f"{EXECUTION}/source-blocks.tar.gz",
            "pages": 1,
            "volumes": [
                {
                    "index": 0,
                    "snapshotId": source,
                    "done": True,
                    "heldBlocks": 6_000,
                    "volumeSizeGiB": 8,
                    "nextToken": None,
                    "nextBlockIndex": 8_000,
                    "parts": 1,
                    "blockListError": None,
                }
            ],
        },
        "snapshots": {
            "snapshots": [
                {"index": 0, "snapshotId": new, "sourceSnapshotId": source, "deviceName": None}
            ],
            "completed": True,
        },
        "fastSnapshotRestore": {
            "states": [{"snapshotId": new, "availabilityZone": "us-east-1a", "state": "enabling"}]
        },
        "teardown": {"remaining": 0},
        "outcome": "success",
    }


def test_an_inconsistent_source_is_reported_with_what_to_do(world: World) -> None:
    """The data plane found the source's filesystem inconsistent and copied it whole: the
    volume says so, and a note tells the user to fsck the source (issue #23)."""
    state = success_state(world)
    (entry,) = state["compaction"]["summary"]["volumes"]
    finding = (
        "partition 1 (ext4, raw): source filesystem inconsistent, e2fsck found: Block bitmap "
        "differences: +(8585--8776); its map is not trusted, every block copied raw: check "
        "and repair the source filesystem (fsck)"
    )
    entry.update(sourceConsistent=False, notes=["partition 2 (swap, header): swap", finding])
    result = report.handler(state, world.context)
    assert result["volumes"][0]["sourceConsistent"] is False
    assert result["notes"] == [
        NOTE,
        "volume 0: the source filesystem is inconsistent (its own checker disputes its "
        "free-space map), so the affected partitions were copied whole, as the source has "
        "them: check and repair the source filesystem (fsck) and compact again for a smaller "
        f"snapshot. {finding}",
    ]


def test_success_report_is_returned_and_published(world: World) -> None:
    state = success_state(world)
    new = state["snapshots"]["snapshots"][0]["snapshotId"]
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [
            s.update(FullSnapshotSizeInBytes=2_097_152_000) for s in parsed["Snapshots"]
        ],
    )
    sent = capture(aws.events(), "PutEvents")
    result = report.handler(state, world.context)
    assert result["outcome"] == "success"
    assert result["executionName"] == EXECUTION
    assert result["target"] == "volume"
    assert result["source"] == state["plan"]["source"]
    assert result["volumes"] == [
        {
            "index": 0,
            "sourceSnapshotId": state["plan"]["volumes"][0]["sourceSnapshotId"],
            "newSnapshotId": new,
            "targetSnapshotId": None,
            "sourceFullSizeBytes": 8_589_934_592,
            "newFullSizeBytes": 2_097_152_000,
            "sourceBytesRead": 3_000_000_000,
            "targetBytesWritten": 2_000_000_000,
            "writtenBlocks": 4000,  # 2,097,152,000 bytes in 512 KiB blocks
            "heldBlocks": 6_000,
            "heldBlocksRead": 5_800,
            "sourceConsistent": True,
            "blockListError": None,
        }
    ]
    assert result["imageId"] is None
    assert result["fastSnapshotRestore"] == state["fastSnapshotRestore"]["states"]
    assert result["phaseSeconds"]["compaction"] == 600.0
    assert result["totalSeconds"] > 1800
    assert result["error"] is None
    assert (result["warnings"], result["delivered"]) == ([], True)
    assert result["newSnapshotIds"] == [new]
    assert result["notes"] == [NOTE]
    (entries,) = (call["Entries"] for call in sent)
    assert entries == [
        {
            "Source": "ebs-snapshot-compactor",
            "DetailType": "EBS Snapshot Compaction Succeeded",
            "Detail": json.dumps(result),
            "EventBusName": "default",
        }
    ]


def test_failure_before_a_plan_still_reports(world: World) -> None:
    cause = json.dumps(
        {"errorMessage": "snapshot snap-0 not found in us-east-1", "errorType": "SnapshotNotFound"}
    )
    state = {
        "input": {"snapshotId": "snap-0123456789abcdef0"},
        "executionName": EXECUTION,
        "launchAttempt": 1,
        "timings": {
            "start": TIMINGS["start"],
            "prepare": TIMINGS["prepare"],
            "teardown": TIMINGS["teardown"],
        },
        "error": {"Error": "SnapshotNotFound", "Cause": cause},
        "outcome": "failure",
    }
    sent = capture(aws.events(), "PutEvents")
    result = report.handler(state, world.context)
    assert result["outcome"] == "failure"
    assert result["source"] == {"kind": "snapshot", "snapshotId": "snap-0123456789abcdef0"}
    assert result["volumes"] == []
    assert result["error"] == {
        "Error": "SnapshotNotFound",
        "Cause": "snapshot snap-0 not found in us-east-1",
    }
    assert set(result["phaseSeconds"]) == {"prepare", "teardown"}
    assert (result["delivered"], result["newSnapshotIds"], result["warnings"]) == (False, [], [])
    assert result["notes"] == []
    assert sent[0]["Entries"][0]["DetailType"] == "EBS Snapshot Compaction Failed"


def test_deleted_new_snapshot_is_not_reported_as_new(world: World) -> None:
    state = success_state(world)
    new = state["snapshots"]["snapshots"][0]["snapshotId"]
    world.ec2.delete_snapshot(SnapshotId=new)
    state.update(outcome="failure", error={"Error": "States.Timeout", "Cause": "too slow"})
    result = report.handler(state, world.context)
    volume = result["volumes"][0]
    assert (volume["newSnapshotId"], volume["newFullSizeBytes"]) == (None, None)
    assert (result["delivered"], result["newSnapshotIds"]) == (False, [])


def test_event_not_accepted_fails_the_task(world: World) -> None:
    # PutEvents answers 200 with FailedEntryCount when it rejects an entry
    respond(
        aws.events(),
        "PutEvents",
        lambda _: {
            "FailedEntryCount": 1,
            "Entries": [{"ErrorCode": "AccessDeniedException", "ErrorMessage": "not allowed"}],
        },
    )
    with pytest.raises(
        events.PublishFailed, match=r"PutEvents to default failed.*AccessDeniedException"
    ):
        report.handler(success_state(world), world.context)


def test_event_without_an_id_fails_the_task(world: World) -> None:
    respond(aws.events(), "PutEvents", lambda _: {"FailedEntryCount": 0, "Entries": [{}]})
    with pytest.raises(events.PublishFailed, match="not accepted"):
        report.handler(success_state(world), world.context)


def test_put_events_throttled_fails_the_task_with_a_retryable_error(world: World) -> None:
    respond(aws.events(), "PutEvents", lambda _: error_response("ThrottlingException"))
    with pytest.raises(TransientAwsError, match="PutEvents answered ThrottlingException"):
        report.handler(success_state(world), world.context)


def test_put_events_refused_fails_the_task(world: World) -> None:
    respond(aws.events(), "PutEvents", lambda _: error_response("AccessDeniedException"))
    with pytest.raises(ClientError, match="AccessDeniedException"):
        report.handler(success_state(world), world.context)


def lambda_error(error_type: str, message: str) -> dict[str, str]:
    cause = json.dumps({"errorMessage": message, "errorType": error_type, "stackTrace": []})
    return {"Error": error_type, "Cause": cause}


def test_succeeded_with_warnings_reports_the_delivery_and_the_error(world: World) -> None:
    state = success_state(world)
    new = state["snapshots"]["snapshots"][0]["snapshotId"]
    state.update(
        outcome="succeeded-with-warnings",
        warning=lambda_error("RuntimeError", "PutEvents to default failed (throttled)"),
    )
    sent = capture(aws.events(), "PutEvents")
    result = report.handler(state, world.context)
    assert result["outcome"] == "succeeded-with-warnings"
    assert result["warnings"] == [
        {"Error": "RuntimeError", "Cause": "PutEvents to default failed (throttled)"}
    ]
    assert result["error"] is None
    assert (result["delivered"], result["newSnapshotIds"]) == (True, [new])
    assert result["volumes"][0]["newSnapshotId"] == new
    (entry,) = sent[0]["Entries"]
    assert entry["DetailType"] == "EBS Snapshot Compaction Succeeded"
    assert json.loads(entry["Detail"])["outcome"] == "succeeded-with-warnings"
    assert json.loads(entry["Detail"])["warnings"] == result["warnings"]


def test_warning_without_an_outcome_is_succeeded_with_warnings(world: World) -> None:
    state = success_state(world)
    del state["outcome"]
    state["warning"] = {"Error": "States.Timeout", "Cause": "Enable FSR took too long"}
    result = report.handler(state, world.context)
    assert result["outcome"] == "succeeded-with-warnings"
    assert result["warnings"] == [state["warning"]]


def test_teardown_error_is_a_warning(world: World) -> None:
    state = success_state(world)
    state["teardownError"] = lambda_error("TeardownIncomplete", "2 resources remain")
    result = report.handler(state, world.context)
    assert result["outcome"] == "success"
    assert result["warnings"] == [{"Error": "TeardownIncomplete", "Cause": "2 resources remain"}]


def test_delivered_from_the_tag_when_the_state_lost_completed(world: World) -> None:
    state = success_state(world)
    del state["snapshots"]["completed"]
    new = state["snapshots"]["snapshots"][0]["snapshotId"]
    assert report.handler(state, world.context)["delivered"] is False
    world.ec2.create_tags(
        Resources=[new], Tags=[{"Key": "ebs-snapshot-compactor:delivered", "Value": "true"}]
    )
    assert report.handler(state, world.context)["delivered"] is True


@pytest.mark.parametrize(
    ("outcome", "detail_type"),
    [
        ("success", "EBS Snapshot Compaction Succeeded"),
        ("succeeded-with-warnings", "EBS Snapshot Compaction Succeeded"),
        ("failure", "EBS Snapshot Compaction Failed"),
    ],
)
def test_detail_type_by_outcome(world: World, outcome: str, detail_type: str) -> None:
    state = dict(success_state(world), outcome=outcome)
    sent = capture(aws.events(), "PutEvents")
    assert report.handler(state, world.context)["outcome"] == outcome
    assert sent[0]["Entries"][0]["DetailType"] == detail_type
