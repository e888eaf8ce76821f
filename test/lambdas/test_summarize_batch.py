"""summarize_batch (compactor/batch/): the Distributed Map's ResultWriter files, in the shapes
AWS documents (manifest.json listing SUCCEEDED_n/FAILED_n/PENDING_n.json, each a JSON array of
child executions with Input/Output as JSON strings and Error/Cause on failures), become the batch
report in S3 (one entry per item: outcome, stored bytes, saving, duration, the child's own error),
a completion event and the summary; also when the Map failed and wrote part of its results or
none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from compactor import aws, schemas
from compactor.batch import report as batch_report
from compactor.errors import InvalidInput
from compactor.handlers import resolve_batch, summarize_batch
from conftest import BATCH_BUCKET, World
from support import assert_valid, capture, client_error, on_params, respond

BATCH = "nightly-2026-11-23"
BATCH_ARN = f"arn:aws:states:us-east-1:123456789012:execution:compactor-test-batch:{BATCH}"
MAP_RUN_ID = "ad9b5f27-090b-3ac6-9beb-243cd77144a7"
MAP_RUN_ARN = (
    f"arn:aws:states:us-east-1:123456789012:mapRun:compactor-test-batch/Compact:{MAP_RUN_ID}"
)
RESULTS_BUCKET = BATCH_BUCKET  # conftest makes it
GIB = 1024**3
SNAPS = [f"snap-0123456789abcdef{n}" for n in range(5)]
IMAGE = "ami-0123456789abcdef0"


@pytest.fixture
def batch(world: World) -> Iterator[dict[str, Any]]:
    """resolve_batch's result for four snapshots and an AMI, each estimated first."""
    assert world.env["BATCH_RESULTS_BUCKET"] == RESULTS_BUCKET
    items = [{"snapshotId": s} for s in SNAPS[:4]] + [{"imageId": IMAGE}]
    yield resolve_batch.handler(
        {"input": {"items": items, "minSavingsPercent": 20}, "executionName": BATCH},
        world.context,
    )


def child_arn(name: str) -> str:
    return f"arn:aws:states:us-east-1:123456789012:execution:compactor-test:{name}"


def volume(source: int | None, new: int | None, held: int | None, written: int | None) -> Any:
    return {
        "sourceFullSizeBytes": source,
        "newFullSizeBytes": new,
        "heldBlocks": held,
        "writtenBlocks": written,
    }


def child_report(outcome: str, volumes: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "volumes": volumes,
        "newSnapshotIds": [f"snap-0fedcba98765432{n}" for n in range(len(volumes))],
        "imageId": None,
        "warnings": [],
        **extra,
    }


def ran(child: dict[str, Any], output: dict[str, Any], start: str, stop: str) -> dict[str, Any]:
    """What startExecution.sync:2 gives, trimmed by the ResultSelector."""
    return {
        "Output": output,
        "ExecutionArn": child_arn(child["childName"]),
        "Status": "SUCCEEDED",
        "StartDate": start,
        "StopDate": stop,
    }


def entry(item: dict[str, Any], status: str, start: str, stop: str, **more: Any) -> dict[str, Any]:
    """One child execution of the Map run in a ResultWriter file."""
    result = {
        "ExecutionArn": f"arn:aws:states:us-east-1:123456789012:execution:"
        f"compactor-test-batch/Compact:{item['childName'][-12:]}",
        "Input": json.dumps(item),
        "InputDetails": {"Included": True},
        "Name": item["childName"][-12:],
        "OutputDetails": {"Included": True},
        "RedriveCount": 0,
        "RedriveStatus": "NOT_REDRIVABLE",
        "RedriveStatusReason": f"Execution is {status} and cannot be redriven",
        "StartDate": start,
        "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:"
        "compactor-test-batch/Compact",
        "Status": status,
        "StopDate": stop,
    }
    result.update(more)
    return result


def write_results(files: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The ResultWriter's files under batches/<map run id>/; returns `$.map`."""
    s3 = aws.s3()
    listed: dict[str, list[dict[str, Any]]] = {"FAILED": [], "PENDING": [], "SUCCEEDED": []}
    for status, entries in files.items():
        key = f"batches/{MAP_RUN_ID}/{status}_0.json"
        body = json.dumps(entries).encode()
        s3.put_object(Bucket=RESULTS_BUCKET, Key=key, Body=body)
        listed[status].append({"Key": key, "Size": len(body)})
    manifest_key = f"batches/{MAP_RUN_ID}/manifest.json"
    manifest = {
        "DestinationBucket": RESULTS_BUCKET,
        "MapRunArn": MAP_RUN_ARN,
        "ResultFiles": listed,
    }
    s3.put_object(Bucket=RESULTS_BUCKET, Key=manifest_key, Body=json.dumps(manifest).encode())
    return {
        "MapRunArn": MAP_RUN_ARN,
        "ResultWriterDetails": {"Bucket": RESULTS_BUCKET, "Key": manifest_key},
    }


def estimate(percent: float) -> dict[str, Any]:
    return {"outcome": "estimated", "estimate": {"savingsPercent": percent}, "volumes": []}


def mixed_results(batch: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Item 0 compacted (EBS sizes), 1 failed (no such snapshot), 2 not worth it, 3 compacted
    with warnings (block counts only), 4 (the AMI) failed in its dry run with a timeout."""
    one, two, three, four, five = batch["items"]
    t0, t1 = "2026-11-23T01:00:00.000Z", "2026-11-23T01:30:00.500Z"
    compacted = dict(
        one,
        estimated=ran(one, estimate(60), t0, t0),
        compacted=ran(one, child_report("success", [volume(8 * GIB, 2 * GIB, 0, 0)]), t0, t1),
    )
    cause = {
        "ExecutionArn": child_arn(two["childName"] + "-dry"),
        "Name": two["childName"] + "-dry",
        "Status": "FAILED",
        "Error": "SnapshotNotFound",
        # the child's Fail passes the Lambda's error JSON on as its cause
        "Cause": json.dumps(
            {
                "errorMessage": f"snapshot {two['id']} not found in us-east-1: check the id",
                "errorType": "SnapshotNotFound",
                "requestId": "0c7f",
                "stackTrace": ['  File "/var/task/compactor/planning.py", line 40'],
            }
        ),
    }
    skipped = dict(three, estimated=ran(three, estimate(5), t0, t1), skipped=True)
    warned = dict(
        four,
        estimated=ran(four, estimate(50), t0, t0),
        compacted=ran(
            four,
            child_report(
                "succeeded-with-warnings",
                [volume(None, None, 4096, 1024), volume(None, None, 2048, 1024)],
                warnings=[{"Error": "FastSnapshotRestoreFailed", "Cause": "quota"}],
            ),
            t0,
            t1,
        ),
    )
    return {
        "SUCCEEDED": [
            entry(three, "SUCCEEDED", t0, t1, Output=json.dumps(skipped)),
            entry(one, "SUCCEEDED", t0, t1, Output=json.dumps(compacted)),
            entry(four, "SUCCEEDED", t0, t1, Output=json.dumps(warned)),
        ],
        "FAILED": [
            entry(two, "FAILED", t0, t0, Error="States.TaskFailed", Cause=json.dumps(cause)),
            entry(five, "FAILED", t0, t1, Error="States.Timeout", Cause="the task timed out"),
        ],
    }


def summarize(world: World, batch: dict[str, Any], **payload: Any) -> dict[str, Any]:
    event = {"executionName": BATCH, "executionArn": BATCH_ARN, "batch": batch, **payload}
    result = summarize_batch.handler(event, world.context)
    assert_valid(result, schemas.result_schema("summarize_batch"))
    return dict(result)


def stored_report(summary: dict[str, Any]) -> dict[str, Any]:
    assert summary["report"] == {
        "bucket": RESULTS_BUCKET,
        "key": f"batches/{BATCH}/batch-report.json",
    }
    body = aws.s3().get_object(Bucket=RESULTS_BUCKET, Key=summary["report"]["key"])["Body"]
    report = json.loads(body.read())
    assert_valid(report, "batch-report.schema.json")
    return dict(report)


def test_succeeded_failed_and_skipped_items_are_reported(
    world: World, batch: dict[str, Any]
) -> None:
    events = capture(aws.events(), "PutEvents")
    summary = summarize(world, batch, map=write_results(mixed_results(batch)))
    report = stored_report(summary)
    by_id = {item["id"]: item for item in report["items"]}
    assert [item["id"] for item in report["items"]] == [*SNAPS[:4], IMAGE]
    done = by_id[SNAPS[0]]
    assert (done["outcome"], done["storedBytesBefore"], done["storedBytesAfter"]) == (
        "succeeded",
        8 * GIB,
        2 * GIB,
    )
    assert (done["bytesSaved"], done["storedBytesBasis"]) == (6 * GIB, "fullSnapshotSize")
    assert done["durationSeconds"] == 1800.5
    assert done["executionArn"] == child_arn(done["childName"])
    assert done["estimate"] == {"savingsPercent": 60}
    assert done["newSnapshotIds"] == ["snap-0fedcba987654320"]
    missing = by_id[SNAPS[1]]
    assert (missing["outcome"], missing["error"]) == ("failed", "SnapshotNotFound")
    assert missing["cause"] == f"snapshot {SNAPS[1]} not found in us-east-1: check the id"
    assert missing["executionArn"].endswith("-dry")
    assert missing["storedBytesBefore"] is None and missing["bytesSaved"] is None
    skipped = by_id[SNAPS[2]]
    assert (skipped["outcome"], skipped["estimate"]) == ("skipped", {"savingsPercent": 5})
    warned = by_id[SNAPS[3]]
    assert warned["outcome"] == "succeeded-with-warnings"
    assert warned["storedBytesBefore"] == (4096 + 2048) * 512 * 1024
    assert warned["storedBytesAfter"] == 2048 * 512 * 1024
    assert warned["storedBytesBasis"] == "blocks"
    assert "FastSnapshotRestoreFailed" in warned["cause"]
    timed_out = by_id[IMAGE]
    assert (timed_out["outcome"], timed_out["error"]) == ("failed", "States.Timeout")
    assert report["totals"] == {
        "items": 5,
        "succeeded": 2,
        "failed": 2,
        "skipped": 1,
        "estimated": 0,
        "notRun": 0,
        "alreadyCompacted": 0,
        "storedBytesBefore": 8 * GIB + 6144 * 512 * 1024,
        "storedBytesAfter": 2 * GIB + 2048 * 512 * 1024,
        "bytesSaved": 6 * GIB + 4096 * 512 * 1024,
    }
    assert (report["outcome"], report["mapRunArn"], report["mapError"]) == (
        "partial",
        MAP_RUN_ARN,
        None,
    )
    assert summary["totals"] == report["totals"] and summary["outcome"] == "partial"
    assert [(f["id"], f["error"]) for f in summary["failedItems"]] == [
        (SNAPS[1], "SnapshotNotFound"),
        (IMAGE, "States.Timeout"),
    ]
    sent = events[0]["Entries"][0]
    assert (sent["Source"], sent["DetailType"]) == (
        "ebs-snapshot-compactor",
        "EBS Snapshot Compaction Batch Completed",
    )
    assert json.loads(sent["Detail"]) == summary


def test_every_item_compacted_is_a_succeeded_batch(world: World, batch: dict[str, Any]) -> None:
    t0, t1 = "2026-11-23T01:00:00Z", "2026-11-23T01:10:00Z"
    entries = []
    for item in batch["items"]:
        # sync:2 gives the child's output parsed; the iteration's Output is a JSON string
        report = child_report("success", [volume(4 * GIB, GIB, None, None)])
        state = dict(item, estimated=ran(item, estimate(75), t0, t0))
        state["compacted"] = ran(item, report, t0, t1)
        entries.append(entry(item, "SUCCEEDED", t0, t1, Output=json.dumps(state)))
    summary = summarize(world, batch, map=write_results({"SUCCEEDED": entries}))
    assert summary["outcome"] == "succeeded" and summary["failedItems"] == []
    assert summary["totals"]["bytesSaved"] == 5 * 3 * GIB
    assert {i["durationSeconds"] for i in stored_report(summary)["items"]} == {600.0}


def test_a_map_over_its_tolerated_failures_reports_failed_and_not_run_items(
    world: World, batch: dict[str, Any]
) -> None:
    """The Map failed (Catch → mapError, no `map`): the map run is found with ListMapRuns and
    its partial results read; items still PENDING are reported as not run."""
    files = mixed_results(batch)
    pending = [entry(item, "PENDING", "", "") for item in batch["items"][2:]]  # never started
    write_results({"FAILED": files["FAILED"][:1], "PENDING": pending})
    calls = respond(
        aws.sfn(), "ListMapRuns", lambda params: {"mapRuns": [{"mapRunArn": MAP_RUN_ARN}]}
    )
    map_error = {
        "Error": "States.ExceedToleratedFailureThreshold",
        "Cause": "The specified tolerated failure threshold was exceeded",
    }
    summary = summarize(world, batch, mapError=map_error)
    assert calls[0]["executionArn"] == BATCH_ARN
    report = stored_report(summary)
    outcomes = [item["outcome"] for item in report["items"]]
    # item 0 has no result at all (its file is not listed): not run either
    assert outcomes == ["not-run", "failed", "not-run", "not-run", "not-run"]
    assert report["outcome"] == "failed" and summary["outcome"] == "failed"
    assert report["mapError"] == {"error": map_error["Error"], "cause": map_error["Cause"]}
    assert report["totals"]["notRun"] == 4 and report["totals"]["failed"] == 1
    assert "stopped before this item ended" in report["items"][2]["cause"]
    assert [f["id"] for f in summary["failedItems"]] == [*SNAPS[:4], IMAGE]


@pytest.mark.parametrize("map_runs", [{"mapRuns": []}, None])
def test_a_failed_map_without_results_still_gives_a_report(
    world: World, batch: dict[str, Any], map_runs: dict[str, Any] | None
) -> None:
    """No map run (or ListMapRuns refused): every item is not run; the report is written."""
    if map_runs is None:

        def deny(params: dict[str, Any]) -> None:
            raise client_error("ListMapRuns", "AccessDeniedException")

        on_params(aws.sfn(), "ListMapRuns", deny)
    else:
        respond(aws.sfn(), "ListMapRuns", lambda params: map_runs)
    summary = summarize(world, batch, mapError={"Error": "States.Runtime", "Cause": "boom"})
    report = stored_report(summary)
    assert {item["outcome"] for item in report["items"]} == {"not-run"}
    assert all("map run was not found" in item["cause"] for item in report["items"])
    assert report["totals"]["notRun"] == 5 and summary["outcome"] == "failed"


def test_a_listed_map_run_without_a_manifest_is_said(world: World, batch: dict[str, Any]) -> None:
    respond(aws.sfn(), "ListMapRuns", lambda params: {"mapRuns": [{"mapRunArn": MAP_RUN_ARN}]})
    summary = summarize(world, batch, mapError={"Error": "States.Runtime", "Cause": "boom"})
    item = stored_report(summary)["items"][0]
    assert (
        item["cause"] == f"no manifest at s3://{RESULTS_BUCKET}/batches/{MAP_RUN_ID}/manifest.json"
    )


def test_dry_run_children_are_estimated(world: World, batch: dict[str, Any]) -> None:
    t0 = "2026-11-23T01:00:00Z"
    item = dict(batch["items"][0], estimate=None)
    state = dict(item, compacted=ran(item, estimate(42), t0, t0))
    summary = summarize(
        world,
        dict(batch, items=[item]),
        map=write_results({"SUCCEEDED": [entry(item, "SUCCEEDED", t0, t0, Output=state)]}),
    )
    only = stored_report(summary)["items"][0]
    assert (only["outcome"], only["estimate"], only["bytesSaved"]) == (
        "estimated",
        {"savingsPercent": 42},
        None,
    )
    assert summary["outcome"] == "succeeded" and summary["totals"]["estimated"] == 1


def test_an_empty_batch_succeeds_with_zero_totals(world: World, batch: dict[str, Any]) -> None:
    summary = summarize(world, dict(batch, items=[], count=0), map=write_results({}))
    assert summary["outcome"] == "succeeded" and summary["totals"]["items"] == 0


def test_sources_left_out_as_compacted_already_are_reported(
    world: World, batch: dict[str, Any]
) -> None:
    """resolve_batch's alreadyCompacted goes into the report as it is, and its count into the
    totals (and so the summary); they are not items and a batch of none still succeeds."""
    left_out = {
        "count": 3,
        "reason": "a delivered compacted copy exists: set selector.includeCompacted",
        "sources": [{"id": SNAPS[4], "kind": "snapshot", "copies": ["snap-0fedcba987654321f"]}],
    }
    summary = summarize(
        world, dict(batch, items=[], count=0, alreadyCompacted=left_out), map=write_results({})
    )
    assert summary["outcome"] == "succeeded"
    assert (summary["totals"]["items"], summary["totals"]["alreadyCompacted"]) == (0, 3)
    assert stored_report(summary)["alreadyCompacted"] == left_out
    assert stored_report(summarize(world, batch, map=write_results({})))["alreadyCompacted"] is None


def test_the_summary_lists_at_most_twenty_failed_items_with_short_causes() -> None:
    items = [
        dict(
            batch_report._blank({"id": f"snap-{n:017x}", "kind": "snapshot", "childName": "x"}),
            outcome="failed",
            error="SnapshotNotFound",
            cause="c" * 2000,
        )
        for n in range(30)
    ]
    built = {"executionName": BATCH, "outcome": "failed", "mapError": None, "totals": {}}
    summary = batch_report.summary(dict(built, items=items), "b", "k")
    assert len(summary["failedItems"]) == 20
    assert {len(f["cause"]) for f in summary["failedItems"]} == {500}


def test_a_payload_without_the_batch_is_refused(world: World) -> None:
    with pytest.raises(InvalidInput, match="no batch"):
        summarize_batch.handler({"executionName": BATCH, "map": {}}, world.context)


@pytest.mark.parametrize(
    ("status", "error"), [("TIMED_OUT", "States.Timeout"), ("ABORTED", "ExecutionAborted")]
)
def test_a_child_that_timed_out_or_was_stopped_is_named_so(status: str, error: str) -> None:
    item = {"id": SNAPS[0], "kind": "snapshot", "childName": "n"}
    child = {"ExecutionArn": child_arn("n"), "Name": "n", "Status": status}
    failed = entry(item, "FAILED", "", "", Error="States.TaskFailed", Cause=json.dumps(child))
    reported = batch_report._item(item, failed, None)
    assert (reported["outcome"], reported["error"]) == ("failed", error)
    assert reported["cause"] == f"the child execution ended {status}"
    assert reported["executionArn"] == child_arn("n")


def test_results_spread_over_several_files_are_all_read(
    world: World, batch: dict[str, Any]
) -> None:
    """A large map run writes more than one file per status (SUCCEEDED_0, SUCCEEDED_1, ...)."""
    t0, t1 = "2026-11-23T01:00:00Z", "2026-11-23T01:00:30Z"
    s3, prefix = aws.s3(), f"batches/{MAP_RUN_ID}"
    listed = []
    for index, item in enumerate(batch["items"]):
        state = dict(item, compacted=ran(item, child_report("success", []), t0, t1))
        body = json.dumps([entry(item, "SUCCEEDED", t0, t1, Output=json.dumps(state))]).encode()
        key = f"{prefix}/SUCCEEDED_{index}.json"
        s3.put_object(Bucket=RESULTS_BUCKET, Key=key, Body=body)
        listed.append({"Key": key, "Size": len(body)})
    manifest = {
        "DestinationBucket": RESULTS_BUCKET,
        "MapRunArn": MAP_RUN_ARN,
        "ResultFiles": {"FAILED": [], "PENDING": [], "SUCCEEDED": listed},
    }
    s3.put_object(Bucket=RESULTS_BUCKET, Key=f"{prefix}/manifest.json", Body=json.dumps(manifest))
    details = {"Bucket": RESULTS_BUCKET, "Key": f"{prefix}/manifest.json"}
    map_output = {"MapRunArn": MAP_RUN_ARN, "ResultWriterDetails": details}
    summary = summarize(world, batch, map=map_output)
    assert summary["totals"]["succeeded"] == 5 and summary["outcome"] == "succeeded"
