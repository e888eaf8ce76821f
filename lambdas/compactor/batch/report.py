"""The batch report (contract/schemas/batch-report.schema.json): one entry per item from the
Map's results (compactor/batch/results.py), totals, and the summary the execution returns.

Stored bytes of an item are its child report's volumes added up: before = each source's
FullSnapshotSizeInBytes (`sourceFullSizeBytes`), else the blocks the source holds
(`heldBlocks` x 512 KiB); after = each new snapshot's FullSnapshotSizeInBytes
(`newFullSizeBytes`), else the blocks written (`writtenBlocks` x 512 KiB). `storedBytesBasis`
says which was used; null bytes when a volume has neither."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from compactor import contract
from compactor.batch.results import MapResults, parsed

# EBS stores snapshots in blocks of this size (a volume's block counts are of them)
BLOCK_BYTES = contract.dataplane_constant("ebsBlockBytes")
# failed items listed in the summary (the report has all of them)
SUMMARY_FAILED_ITEMS = 20
SUMMARY_CAUSE_CHARS = 500
# a child that ended without an error of its own (timed out, stopped)
CHILD_END_ERRORS = {"TIMED_OUT": "States.Timeout", "ABORTED": "ExecutionAborted"}
OUTCOME_BY_CHILD = {
    "success": "succeeded",
    "succeeded-with-warnings": "succeeded-with-warnings",
    "estimated": "estimated",
}


def items(batch_items: Sequence[Mapping[str, Any]], results: MapResults) -> list[dict[str, Any]]:
    """One report entry per batch item, in the batch's order."""
    by_name: dict[str, Mapping[str, Any]] = {}
    for entry in results.entries:
        item = parsed(entry.get("Input"))
        if isinstance(item, Mapping) and "childName" in item:
            by_name[item["childName"]] = entry
    reported: list[dict[str, Any]] = []
    for item in batch_items:
        reported.append(_item(item, by_name.get(item["childName"]), results.missing))
    return reported


def _blank(item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": item["id"],
        "kind": item["kind"],
        "childName": item["childName"],
        "outcome": "not-run",
        "executionArn": None,
        "storedBytesBefore": None,
        "storedBytesAfter": None,
        "bytesSaved": None,
        "storedBytesBasis": None,
        "durationSeconds": None,
        "newSnapshotIds": [],
        "imageId": None,
        "error": None,
        "cause": None,
        "estimate": None,
    }


def _item(
    item: Mapping[str, Any], entry: Mapping[str, Any] | None, missing: str | None
) -> dict[str, Any]:
    out = _blank(item)
    if entry is None:
        out["cause"] = missing or "the Map has no result for this item"
        return out
    out["durationSeconds"] = _seconds(entry.get("StartDate"), entry.get("StopDate"))
    status = str(entry.get("Status") or "")
    if status == "SUCCEEDED":
        _succeeded(out, parsed(entry.get("Output")) or {})
    elif status in ("PENDING", "RUNNING", ""):
        out["cause"] = f"the Map stopped before this item ended (status {status or 'unknown'})"
    else:
        _failed(out, entry, status)
    return out


def _succeeded(out: dict[str, Any], state: Mapping[str, Any]) -> None:
    estimated = state.get("estimated") or {}
    estimate_report = parsed(estimated.get("Output")) or {}
    if isinstance(estimate_report, Mapping):
        out["estimate"] = estimate_report.get("estimate")
    if state.get("skipped"):
        out["outcome"] = "skipped"
        out["executionArn"] = estimated.get("ExecutionArn")
        return
    compacted = state.get("compacted") or {}
    report = parsed(compacted.get("Output")) or {}
    out["executionArn"] = compacted.get("ExecutionArn")
    out["outcome"] = OUTCOME_BY_CHILD.get(str(report.get("outcome")), "succeeded")
    if out["outcome"] == "estimated":
        out["estimate"] = report.get("estimate")
    out["newSnapshotIds"] = list(report.get("newSnapshotIds") or [])
    out["imageId"] = report.get("imageId")
    warnings = report.get("warnings") or []
    if warnings and out["outcome"] == "succeeded-with-warnings":
        out["cause"] = "; ".join(str(w) for w in warnings)[:SUMMARY_CAUSE_CHARS]
    if out["outcome"] != "estimated":
        _stored_bytes(out, report.get("volumes") or [])


def _stored_bytes(out: dict[str, Any], volumes: Sequence[Mapping[str, Any]]) -> None:
    before = after = 0
    bases: set[str] = set()
    for volume in volumes:
        source, source_basis = _bytes(volume, "sourceFullSizeBytes", "heldBlocks")
        new, new_basis = _bytes(volume, "newFullSizeBytes", "writtenBlocks")
        if source is None or new is None:
            return
        before, after = before + source, after + new
        bases |= {source_basis, new_basis}
    if not volumes:
        return
    out["storedBytesBefore"], out["storedBytesAfter"] = before, after
    out["bytesSaved"] = before - after
    out["storedBytesBasis"] = bases.pop() if len(bases) == 1 else "mixed"


def _bytes(volume: Mapping[str, Any], full: str, blocks: str) -> tuple[int | None, str]:
    if volume.get(full) is not None:
        return int(volume[full]), "fullSnapshotSize"
    if volume.get(blocks) is not None:
        return int(volume[blocks]) * BLOCK_BYTES, "blocks"
    return None, ""


def _failed(out: dict[str, Any], entry: Mapping[str, Any], status: str) -> None:
    """The child's own error name and message: startExecution.sync:2 fails the iteration with
    States.TaskFailed and the child's DescribeExecution (JSON) as the cause."""
    out["outcome"] = "failed"
    error, cause = entry.get("Error"), entry.get("Cause")
    child = parsed(cause)
    if isinstance(child, Mapping):
        child_error = child.get("Error") or child.get("error")
        child_status = str(child.get("Status") or child.get("status") or "")
        if child_error:
            error, cause = child_error, child.get("Cause") or child.get("cause")
        elif child_status in CHILD_END_ERRORS:
            error = CHILD_END_ERRORS[child_status]
            cause = f"the child execution ended {child_status}"
        out["executionArn"] = child.get("ExecutionArn") or child.get("executionArn")
    out["error"] = str(error or f"States.{status.title().replace('_', '')}")
    out["cause"] = _message(cause)


def _message(cause: Any) -> str | None:
    """A Lambda error's message (a task's Cause is its JSON {errorMessage, errorType, ...},
    which the child's Fail state passes on as it is); any other cause as it is."""
    if cause is None:
        return None
    lambda_error = parsed(cause)
    if isinstance(lambda_error, Mapping) and isinstance(lambda_error.get("errorMessage"), str):
        return str(lambda_error["errorMessage"])
    return str(cause)


def _seconds(start: Any, stop: Any) -> float | None:
    begun, ended = _time(start), _time(stop)
    if begun is None or ended is None:
        return None
    return round((ended - begun).total_seconds(), 3)


def _time(value: Any) -> datetime | None:
    """An ISO 8601 string, or epoch seconds / milliseconds (a number)."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, UTC)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def totals(
    reported: Sequence[Mapping[str, Any]], already_compacted: Mapping[str, Any] | None = None
) -> dict[str, int]:
    def count(*outcomes: str) -> int:
        return sum(1 for i in reported if i["outcome"] in outcomes)

    compacted = [i for i in reported if i["bytesSaved"] is not None]
    return {
        "items": len(reported),
        "succeeded": count("succeeded", "succeeded-with-warnings"),
        "failed": count("failed"),
        "skipped": count("skipped"),
        "estimated": count("estimated"),
        "notRun": count("not-run"),
        "alreadyCompacted": int(already_compacted["count"]) if already_compacted else 0,
        "storedBytesBefore": sum(int(i["storedBytesBefore"]) for i in compacted),
        "storedBytesAfter": sum(int(i["storedBytesAfter"]) for i in compacted),
        "bytesSaved": sum(int(i["bytesSaved"]) for i in compacted),
    }


def outcome(counted: Mapping[str, int], map_failed: bool) -> str:
    """succeeded: every item ended well (compacted, skipped or estimated) and the Map did not
    fail; failed: none did; partial: some did."""
    good = counted["succeeded"] + counted["skipped"] + counted["estimated"]
    if good == counted["items"] and not map_failed:
        return "succeeded"
    return "partial" if good else "failed"


def build(
    execution_name: str,
    batch_items: Sequence[Mapping[str, Any]],
    results: MapResults,
    map_error: Mapping[str, Any] | None,
    already_compacted: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`already_compacted`: resolve_batch's `alreadyCompacted` (sources the selector left out),
    carried into the report as it is; they are not items and do not change the outcome."""
    reported = items(batch_items, results)
    counted = totals(reported, already_compacted)
    return {
        "executionName": execution_name,
        "outcome": outcome(counted, map_error is not None),
        "mapRunArn": results.map_run_arn,
        "mapError": _map_error(map_error),
        "totals": counted,
        "alreadyCompacted": dict(already_compacted) if already_compacted else None,
        "items": reported,
    }


def _map_error(map_error: Mapping[str, Any] | None) -> dict[str, str | None] | None:
    if map_error is None:
        return None
    return {"error": str(map_error.get("Error") or ""), "cause": map_error.get("Cause")}


def summary(report: Mapping[str, Any], bucket: str, key: str) -> dict[str, Any]:
    """What the execution returns and the completion event carries: the report without its
    items, the first failed ones (cause cut short) and where the whole report is."""
    failed = [i for i in report["items"] if i["outcome"] in ("failed", "not-run")]
    return {
        "executionName": report["executionName"],
        "outcome": report["outcome"],
        "mapError": report["mapError"],
        "totals": report["totals"],
        "report": {"bucket": bucket, "key": key},
        "failedItems": [
            {
                "id": i["id"],
                "error": i["error"],
                "cause": (i["cause"] or "")[:SUMMARY_CAUSE_CHARS] or None,
            }
            for i in failed[:SUMMARY_FAILED_ITEMS]
        ],
    }
