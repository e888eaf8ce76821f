"""Batches in the twin (twin/batch.py): the batch workflow's Distributed Map runs each item as a
child execution of the main workflow with real copies on loop devices. One deployed twin with two
dirty-disk source snapshots serves every test here; the items that fail are snapshot ids that do
not exist (their children fail in the first task, so they cost no copy)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from devkit.loop import LoopDevices
from twin.batch import MISSING_SNAPSHOT, batch_machine, play, sources
from twin.batch_report import build
from twin.context import Context, setup
from twin.emulator.server import Emulator
from twin.options import Options

MISSING = [MISSING_SNAPSHOT, "snap-0badc0ffee0000001", "snap-0badc0ffee0000002"]


@pytest.fixture(scope="module")
def twin(
    cdk_out: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Context, list[str]]]:
    work = tmp_path_factory.mktemp("batch")
    opts = Options(cdk_out=cdk_out, out_dir=work / "out", picture=False)
    with Emulator(work / "emulator") as emu:
        ctx = setup(emu, opts, None, work, work / "logs")
        yield ctx, sources(ctx, 2)


def batch(ctx: Context, items: list[str], concurrency: int, tolerated: int = 100) -> dict[str, Any]:
    ran = play(ctx, items, concurrency, tolerated)
    return build(ctx, ran, ran.seconds)


def s3_json(ctx: Context, bucket: str, key: str) -> Any:
    body = ctx.emu.boto3_client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    return json.loads(body)


def test_a_batch_succeeds(twin: tuple[Context, list[str]]) -> None:
    ctx, good = twin
    report = batch(ctx, good[:1], concurrency=1)
    assert report["execution_status"] == "SUCCEEDED", report
    assert report["outcome"] == "succeeded"
    (row,) = report["items"]
    assert row["outcome"] == "succeeded" and row["child_status"] == "SUCCEEDED"
    assert 0 < row["stored_bytes_after"] < row["stored_bytes_before"], row
    assert report["totals"]["succeeded"] == 1 and report["totals"]["failed"] == 0
    assert report["leaked_resources"] == 0, report["leaks"]
    assert report["iam_denials"] == [], report["iam_denials"]  # each function's own role allows it


def test_an_item_not_worth_compacting_is_skipped_after_its_dry_run(
    twin: tuple[Context, list[str]],
) -> None:
    ctx, good = twin
    if batch_machine(ctx).logical_id == "TwinHandwrittenBatch":
        pytest.skip("the hand-written batch workflow has no resolve_batch to plan estimates")
    ran = play(ctx, good[:1], 1, extra={"minSavingsPercent": 100})
    report = build(ctx, ran, ran.seconds)
    assert report["execution_status"] == "SUCCEEDED", report
    (row,) = report["items"]
    assert row["outcome"] == "skipped", row
    (child,) = ran.result.child_executions
    assert child["input"]["dryRun"] is True and child["status"] == "SUCCEEDED"
    assert child["output"]["outcome"] == "estimated"
    assert report["leaked_resources"] == 0, report["leaks"]


def test_one_failed_item_while_the_others_succeed(twin: tuple[Context, list[str]]) -> None:
    ctx, good = twin
    report = batch(ctx, [*good, MISSING_SNAPSHOT], concurrency=2)
    assert report["execution_status"] == "SUCCEEDED", report
    assert report["outcome"] == "partial"
    by_id = {row["id"]: row for row in report["items"]}
    for sid in good:
        row = by_id[sid]
        assert row["outcome"] in ("succeeded", "succeeded-with-warnings"), row
        assert row["new_snapshot_ids"]
        assert 0 < row["stored_bytes_after"] < row["stored_bytes_before"], row
    bad = by_id[MISSING_SNAPSHOT]
    assert bad["outcome"] == "failed" and bad["error"] == "States.TaskFailed"
    assert bad["child_status"] == "FAILED"
    assert report["totals"]["succeeded"] == 2 and report["totals"]["failed"] == 1
    assert report["totals"]["bytes_saved"] > 0
    assert report["max_concurrency"] == 2
    assert report["max_running_children"] == 2, "two copies ran at once"
    assert report["leaked_resources"] == 0, report["leaks"]
    manifest_at = report["s3"]["result_writer_manifest"]
    manifest = s3_json(ctx, manifest_at["Bucket"], manifest_at["Key"])
    (failed_file,) = manifest["ResultFiles"]["FAILED"]
    (failed,) = s3_json(ctx, manifest_at["Bucket"], failed_file["Key"])
    assert failed["Error"] == "States.TaskFailed"
    assert json.loads(failed["Cause"])["Status"] == "FAILED"
    assert report["s3_report_agrees"] in (None, True), report["s3"]
    (ok_file,) = manifest["ResultFiles"]["SUCCEEDED"]
    assert len(s3_json(ctx, manifest_at["Bucket"], ok_file["Key"])) == 2


def test_tolerance_zero_fails_the_batch_and_runs_no_more_items(
    twin: tuple[Context, list[str]],
) -> None:
    ctx, good = twin
    report = batch(ctx, [MISSING_SNAPSHOT, good[0]], concurrency=1, tolerated=0)
    assert report["execution_status"] == "FAILED", report
    assert report["map_run_error"] == "States.ExceedToleratedFailureThreshold"
    assert [row["outcome"] for row in report["items"]] == ["failed", "not-run"]
    assert report["child_executions"] == 1, "the good item never started"
    assert report["leaked_resources"] == 0, report["leaks"]
    # ListMapRuns / DescribeMapRun answer from the runner's Map Run (summarize_batch reads them)
    sfn = ctx.emu.boto3_client("stepfunctions")
    (listed,) = sfn.list_map_runs(executionArn=report["batch_execution_arn"])["mapRuns"]
    assert listed["mapRunArn"] == report["map_run_arn"]
    described = sfn.describe_map_run(mapRunArn=listed["mapRunArn"])
    assert described["status"] == "FAILED"
    counts = described["itemCounts"]
    assert (counts["total"], counts["failed"], counts["pending"]) == (2, 1, 1)
    s3_report = report["s3"]["batch_report"]
    if s3_report is not None:  # the template's summarize_batch found the Map Run (ListMapRuns)
        assert s3_report["totals"]["failed"] == 1, s3_report


def test_the_concurrency_limit_is_honoured(twin: tuple[Context, list[str]]) -> None:
    ctx, _ = twin
    report = batch(ctx, MISSING, concurrency=1)
    assert report["execution_status"] == "SUCCEEDED", report
    assert report["child_executions"] == 3
    assert report["max_running_children"] == 1
    assert report["outcome"] == "failed"
    assert report["leaked_resources"] == 0, report["leaks"]


def test_concurrent_loop_attaches_do_not_collide(tmp_path: Path, root_only: None) -> None:
    # Children copy at the same time: each instance's volumes become loop devices attached from
    # several threads of the emulator at once (losetup --find --show): every attach must get its
    # own device over its own file.
    files = []
    for k in range(12):
        path = tmp_path / f"volume-{k}.img"
        path.write_bytes(b"")
        os.truncate(path, 1 << 20)
        files.append(path)
    loops = LoopDevices("test_batch", wait_until_free=True)
    try:
        with ThreadPoolExecutor(len(files)) as pool:
            attached = list(pool.map(lambda f: (f, loops.attach(f)), files))
        assert len({device for _, device in attached}) == len(files)
        for path, device in attached:
            backing = Path(f"/sys/block/{Path(device).name}/loop/backing_file").read_text().strip()
            assert backing == str(path)
    finally:
        assert loops.detach_all() == []


@pytest.mark.parametrize(
    ("fault", "taken"),
    [("", True), ("ebs-account-quota", True), ("error@Report", False), ("ebs-long-seal", False)],
)
def test_a_batch_takes_only_the_account_quota_fault(fault: str, taken: bool) -> None:
    """BATCH=N FAULT=ebs-account-quota: the children running at once are the runs that share the
    account's put quota; any other fault is refused before anything runs."""
    opts = Options(batch=3, fault=fault or None)
    if taken:
        opts.validate()
    else:
        with pytest.raises(ValueError, match="FAULT empty or ebs-account-quota"):
            opts.validate()
