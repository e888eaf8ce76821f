"""The completion event on EventBridge (docs/contract.md, "Report").

success and succeeded-with-warnings are published with the Succeeded detail-type (the new
snapshots were delivered; `outcome` and `warnings` in the detail say what went wrong after), a
failure with the Failed one. PutEvents answers HTTP 200 even when it rejected the entry
(FailedEntryCount, and ErrorCode on the entry): that is a failure too, so the caller's Catch
routes it like any other."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from compactor import aws
from compactor.models import Report

SOURCE = "ebs-snapshot-compactor"
SUCCEEDED = "EBS Snapshot Compaction Succeeded"
FAILED = "EBS Snapshot Compaction Failed"
# the batch state machine's completion event (compactor/batch/report.py, whatever its outcome)
BATCH_COMPLETED = "EBS Snapshot Compaction Batch Completed"


class PublishFailed(RuntimeError):
    """PutEvents did not accept the completion event."""


def detail_type(report: Report) -> str:
    return FAILED if report["outcome"] == "failure" else SUCCEEDED


def publish(report: Report, event_bus_name: str) -> str:
    """Put the completion event; returns its event id, raises PublishFailed if not accepted."""
    return put(detail_type(report), report, event_bus_name)


def put(type_name: str, detail: Mapping[str, Any], event_bus_name: str) -> str:
    """Put one event of this project's source (the batch's completion event uses it too);
    returns its event id, raises PublishFailed if not accepted."""
    response = aws.events().put_events(
        Entries=[
            {
                "Source": SOURCE,
                "DetailType": type_name,
                "Detail": json.dumps(detail),
                "EventBusName": event_bus_name,
            }
        ]
    )
    entries = response.get("Entries", [])
    failures = [
        f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in entries if e.get("ErrorCode")
    ]
    if (
        response.get("FailedEntryCount", 0)
        or failures
        or not entries
        or not entries[0].get("EventId")
    ):
        raise PublishFailed(
            f"PutEvents to {event_bus_name} failed "
            f"({'; '.join(failures) or 'the event was not accepted'}): check the bus name and "
            "the function's events:PutEvents permission"
        )
    return str(entries[0]["EventId"])
