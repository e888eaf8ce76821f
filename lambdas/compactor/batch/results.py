"""The Distributed Map's results as its ResultWriter exports them (Step Functions developer guide,
"ResultWriter"): `$.map.ResultWriterDetails` = {Bucket, Key} of
`<prefix>/<map run id>/manifest.json`, which lists the result files by status:

    {"DestinationBucket": B, "MapRunArn": ARN,
     "ResultFiles": {"SUCCEEDED": [{"Key": K, "Size": n}], "FAILED": [...], "PENDING": [...]}}

Each file is a JSON array of the Map's child executions (one per item): ExecutionArn, Name,
Input (the item, a JSON string), Output (the iteration's output, a JSON string; SUCCEEDED only),
Status, StartDate, StopDate, and Error/Cause when it failed. When the Map itself failed (the
tolerated failure exceeded) the batch state machine's Catch passes `$.mapError` instead of
`$.map`; the map run is then found with ListMapRuns and its manifest read if it was written."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from compactor import aws
from compactor.observability import logger

STATUSES = ("SUCCEEDED", "FAILED", "PENDING")


@dataclass
class MapResults:
    # one entry per child execution of the Map that has a result, as the files give it
    entries: list[dict[str, Any]] = field(default_factory=list)
    map_run_arn: str | None = None
    # why there are no (or not all) results, else None
    missing: str | None = None


def load(
    map_output: Mapping[str, Any] | None,
    prefix: str,
    execution_arn: str | None,
    results_bucket: str,
) -> MapResults:
    """The Map's results; `results_bucket` (the stack's batch results bucket) holds them when the
    Map's output does not tell where they are."""
    details = (map_output or {}).get("ResultWriterDetails") or {}
    bucket, key = details.get("Bucket"), details.get("Key")
    map_run_arn = (map_output or {}).get("MapRunArn")
    if not (bucket and key):
        map_run_arn = _map_run_arn(execution_arn)
        if map_run_arn is None:
            return MapResults(missing="the Map wrote no results (its map run was not found)")
        bucket, key = None, f"{prefix}/{map_run_arn.rsplit(':', 1)[-1]}/manifest.json"
    return _read_manifest(bucket or results_bucket, key, map_run_arn)


def _read_manifest(bucket: str, key: str, map_run_arn: str | None) -> MapResults:
    manifest = _get_json(bucket, key)
    if manifest is None:
        return MapResults(map_run_arn=map_run_arn, missing=f"no manifest at s3://{bucket}/{key}")
    results = MapResults(map_run_arn=manifest.get("MapRunArn") or map_run_arn)
    destination = manifest.get("DestinationBucket") or bucket
    files = manifest.get("ResultFiles") or {}
    for status in STATUSES:
        for result_file in files.get(status) or []:
            entries = _get_json(destination, str(result_file["Key"]))
            if entries is None:
                results.missing = f"result file s3://{destination}/{result_file['Key']} is missing"
                continue
            results.entries += [dict(e, Status=e.get("Status") or status) for e in entries]
    return results


def _get_json(bucket: str, key: str) -> Any:
    try:
        body = aws.s3().get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as error:
        if aws.error_code(error) in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    return json.loads(body)


def _map_run_arn(execution_arn: str | None) -> str | None:
    """The batch execution's map run (it has one Map state), or None."""
    if not execution_arn:
        return None
    try:
        runs = aws.sfn().list_map_runs(executionArn=execution_arn).get("mapRuns", [])
    except ClientError as error:
        logger.warning("ListMapRuns failed", error=str(error))
        return None
    return str(runs[0]["mapRunArn"]) if runs else None


def parsed(value: Any) -> Any:
    """A JSON string parsed (Input, Output, Cause); anything else as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
