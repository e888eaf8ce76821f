"""The completion event on EventBridge (docs/contract.md, "Report")."""

from __future__ import annotations

import json

from compactor import aws
from compactor.models import Report

SOURCE = "ebs-snapshot-compactor"
SUCCEEDED = "EBS Snapshot Compaction Succeeded"
FAILED = "EBS Snapshot Compaction Failed"


def publish(report: Report, event_bus_name: str) -> None:
    response = aws.events().put_events(
        Entries=[
            {
                "Source": SOURCE,
                "DetailType": SUCCEEDED if report["outcome"] == "success" else FAILED,
                "Detail": json.dumps(report),
                "EventBusName": event_bus_name,
            }
        ]
    )
    if response.get("FailedEntryCount", 0):
        failures = [
            f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}"
            for e in response.get("Entries", [])
            if "ErrorCode" in e
        ]
        raise RuntimeError(
            f"PutEvents to {event_bus_name} failed ({'; '.join(failures)}): check the bus name "
            "and the function's events:PutEvents permission"
        )
