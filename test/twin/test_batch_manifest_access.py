"""A failed batch whose Map wrote no manifest, summarized by the deployed summarize_batch function
in the twin: S3 answers a GetObject of a missing key with 403 AccessDenied (not 404) to a caller
that may not s3:ListBucket the bucket, and a ListBucket grant conditioned on `s3:prefix` does not
count (GetObject carries no prefix). The function must still write its report (docs/batch.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from twin.cfn import Deployment
from twin.deploy import deploy
from twin.emulator import map_runs, s3_twin
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator
from twin.execution import invoke_function
from twin.iam.check import check_calls

RESOLVE = "compactor.handlers.resolve_batch.handler"
SUMMARIZE = "compactor.handlers.summarize_batch.handler"
BATCH = "nightly-no-manifest"
MAP_RUN_ID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def _function(d: Deployment, handler: str) -> str:
    (arn,) = [arn for arn, f in d.functions.items() if f.handler == handler]
    return arn


def test_listing_rights_are_read_from_the_statements() -> None:
    bucket = "results"
    arn = f"arn:aws:s3:::{bucket}"
    plain = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": arn}
    prefixed = {**plain, "Condition": {"StringLike": {"s3:prefix": ["batches/*"]}}}
    assert s3_twin.listable_buckets([plain], [bucket]) == {bucket}
    assert s3_twin.listable_buckets([prefixed], [bucket]) == frozenset()
    assert s3_twin.listable_buckets([{**plain, "Action": "s3:*", "Resource": "*"}], [bucket])
    deny = {**plain, "Effect": "Deny"}
    assert s3_twin.listable_buckets([plain, deny], [bucket]) == frozenset()


def test_a_failed_batch_without_a_manifest_still_writes_its_report(
    cdk_out: Path, tmp_path: Path
) -> None:
    with Emulator(tmp_path / "emu", Faults()) as emu:
        d = deploy(emu, cdk_out)
        logs = tmp_path / "logs"
        items = [{"snapshotId": "snap-0123456789abcdef0"}]
        resolve_event = {"input": {"items": items}, "executionName": BATCH}
        resolved = invoke_function(emu, d, _function(d, RESOLVE), resolve_event, "resolve", logs)
        assert resolved.status == "SUCCEEDED", (resolved.error, resolved.cause)
        states = f"arn:aws:states:{d.region}:{d.account}"
        batch_arn = f"{states}:execution:{d.stack_name}-Batch:{BATCH}"
        map_run_arn = f"{states}:mapRun:{d.stack_name}-Batch/Compact:{MAP_RUN_ID}"
        # the Map failed before its ResultWriter wrote anything; ListMapRuns still names its run
        map_runs.record(emu.state, {"mapRunArn": map_run_arn, "executionArn": batch_arn})
        event: dict[str, Any] = {
            "executionName": BATCH,
            "executionArn": batch_arn,
            "batch": resolved.output,
            "mapError": {"Error": "States.ExceedToleratedFailureThreshold", "Cause": "too many"},
        }
        summary = invoke_function(emu, d, _function(d, SUMMARIZE), event, "summarize", logs)
        assert summary.status == "SUCCEEDED", (summary.error, summary.cause)
        report_at = summary.output["report"]
        body = emu.boto3_client("s3").get_object(Bucket=report_at["bucket"], Key=report_at["key"])
        report = json.loads(body["Body"].read())
        (item,) = report["items"]
        assert item["outcome"] == "not-run"
        assert item["cause"].startswith("no manifest at s3://"), item["cause"]
        # summarize_batch may list the bucket, so the missing manifest was a 404 to it
        usage = "a failed batch without a manifest"
        assert check_calls(emu.calls_path, d, cdk_out=cdk_out, usage_from=usage) == []


@pytest.mark.parametrize("caller", ["someone-without-listing", None])
def test_a_missing_key_is_403_to_a_caller_that_may_not_list(
    emulator: Emulator, caller: str | None
) -> None:
    s3 = emulator.boto3_client("s3")
    s3.create_bucket(Bucket="plain-bucket")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/plain-bucket/absent.json"}
    refusal = s3_twin.missing_key_refusal(environ, emulator.account, caller, {})
    if caller is None:  # the twin's own clients: moto's 404
        assert refusal is None
    else:
        assert refusal is not None and refusal[0] == "403 Forbidden"
        assert b"<Code>AccessDenied</Code>" in refusal[2]
        listing = {caller: frozenset({"plain-bucket"})}
        assert s3_twin.missing_key_refusal(environ, emulator.account, caller, listing) is None
