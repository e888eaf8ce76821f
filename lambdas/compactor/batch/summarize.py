"""summarize_batch: the Map's results → the batch report in S3, the completion event, the
summary (compactor/batch/report.py builds them; compactor/batch/results.py reads the Map's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from compactor import aws
from compactor.batch import report, results
from compactor.config import Config
from compactor.errors import InvalidInput
from compactor.report import events

# the ResultWriter's Prefix (lib/batch-workflow.ts) and where the batch report goes
PREFIX = "batches"
REPORT_NAME = "batch-report.json"


def report_key(execution_name: str) -> str:
    return f"{PREFIX}/{execution_name}/{REPORT_NAME}"


def summarize(event: Mapping[str, Any], config: Config) -> dict[str, Any]:
    batch = event.get("batch")
    if not isinstance(batch, Mapping) or not isinstance(batch.get("items"), list):
        raise InvalidInput("the summarize_batch payload has no batch (resolve_batch's result)")
    execution_name = str(event.get("executionName") or batch.get("executionName") or "")
    if not execution_name:
        raise InvalidInput("executionName is missing from the summarize_batch payload")
    map_error = event.get("mapError")
    loaded = results.load(
        event.get("map"), PREFIX, event.get("executionArn"), config.batch_results_bucket
    )
    built = report.build(
        execution_name, batch["items"], loaded, map_error, batch.get("alreadyCompacted")
    )
    bucket, key = config.batch_results_bucket, report_key(execution_name)
    aws.s3().put_object(
        Bucket=bucket,
        Key=key,
        Body=json.dumps(built, indent=1).encode("utf-8"),
        ContentType="application/json",
    )
    summary = report.summary(built, bucket, key)
    events.put(events.BATCH_COMPLETED, summary, config.event_bus_name)
    return summary
