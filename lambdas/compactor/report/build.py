"""The report of one execution (docs/contract.md, "Report") from the whole state data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from compactor import snapshots
from compactor.models import ErrorInfo, FastSnapshotRestoreState, Report, SourceRef, VolumeReport

# EBS stores snapshots in blocks of 512 KiB and FullSnapshotSizeInBytes counts whole blocks
EBS_SNAPSHOT_BLOCK_BYTES = 512 * 1024

PHASES = (
    "prepare",
    "launch",
    "waitReady",
    "compaction",
    "snapshot",
    "registerImage",
    "fastSnapshotRestore",
    "teardown",
    "report",
)


def build(state: Mapping[str, Any], now: datetime) -> Report:
    plan = _mapping(state.get("plan"))
    outcome = str(state.get("outcome") or ("failure" if state.get("error") else "success"))
    new_ids = _new_snapshot_ids(state)
    new_sizes = snapshots.full_sizes(sorted(set(new_ids.values())))
    copied = _copy_summaries(state)
    volumes: list[VolumeReport] = []
    for volume in plan.get("volumes", []):
        index = volume["index"]
        new_id = new_ids.get(index)
        new_size = new_sizes.get(new_id) if new_id else None
        summary = copied.get(index, {})
        volumes.append(
            {
                "index": index,
                "sourceSnapshotId": volume["sourceSnapshotId"],
                # a snapshot that teardown deleted after a failure is not reported as new
                "newSnapshotId": new_id if new_id in new_sizes else None,
                "sourceFullSizeBytes": volume.get("sourceFullSizeBytes"),
                "newFullSizeBytes": new_size,
                "sourceBytesRead": _int_or_none(summary.get("source_bytes_read")),
                "targetBytesWritten": _int_or_none(summary.get("target_bytes_written")),
                "writtenBlocks": (
                    (new_size + EBS_SNAPSHOT_BLOCK_BYTES - 1) // EBS_SNAPSHOT_BLOCK_BYTES
                    if new_size is not None
                    else None
                ),
            }
        )
    timings = _timings(state.get("timings"))
    start = timings.get("start")
    return {
        "outcome": outcome,
        "executionName": state.get("executionName") or plan.get("executionName"),
        "source": plan.get("source") or _source_from_input(state.get("input")),
        "volumes": volumes,
        "imageId": _mapping(state.get("image")).get("imageId"),
        "fastSnapshotRestore": _fast_snapshot_restore(state),
        "phaseSeconds": phase_seconds(timings, now),
        "totalSeconds": round((now - start).total_seconds(), 3) if start else None,
        "error": _error(state.get("error")),
    }


def phase_seconds(timings: Mapping[str, datetime], now: datetime) -> dict[str, float]:
    """Each phase lasts from its start to the start of the phase that came next (or now). A
    phase that ran more than once (a relaunch) holds only its last start, so counts only that."""
    started = sorted(
        ((at, name) for name, at in timings.items() if name in PHASES), key=lambda item: item[0]
    )
    result: dict[str, float] = {}
    for position, (at, name) in enumerate(started):
        end = started[position + 1][0] if position + 1 < len(started) else now
        result[name] = round(max((end - at).total_seconds(), 0.0), 3)
    return result


def _timings(raw: Any) -> dict[str, datetime]:
    parsed: dict[str, datetime] = {}
    for name, value in _mapping(raw).items():
        if isinstance(value, str):
            try:
                at = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            parsed[name] = at if at.tzinfo else at.replace(tzinfo=UTC)
    return parsed


def _new_snapshot_ids(state: Mapping[str, Any]) -> dict[int, str]:
    items = _mapping(state.get("snapshots")).get("snapshots", [])
    return {int(i["index"]): str(i["snapshotId"]) for i in items if "snapshotId" in i}


def _copy_summaries(state: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """The data-plane summary of each volume pair, by the pair's index."""
    summary = _mapping(_mapping(state.get("compaction")).get("summary"))
    index_by_source = {
        v["sourceVolumeId"]: v["index"] for v in _mapping(state.get("ready")).get("volumes", [])
    }
    result: dict[int, Mapping[str, Any]] = {}
    for item in summary.get("volumes", []):
        if isinstance(item, Mapping) and item.get("sourceVolumeId") in index_by_source:
            result[index_by_source[item["sourceVolumeId"]]] = item
    return result


def _fast_snapshot_restore(state: Mapping[str, Any]) -> list[FastSnapshotRestoreState]:
    return list(_mapping(state.get("fastSnapshotRestore")).get("states", []))


def _source_from_input(raw: Any) -> SourceRef | None:
    execution_input = _mapping(raw)
    if isinstance(execution_input.get("snapshotId"), str):
        return {"kind": "snapshot", "snapshotId": execution_input["snapshotId"]}
    if isinstance(execution_input.get("imageId"), str):
        return {"kind": "image", "imageId": execution_input["imageId"]}
    return None


def _error(raw: Any) -> ErrorInfo | None:
    error = _mapping(raw)
    if not error:
        return None
    cause = str(error.get("Cause", ""))
    try:
        # a Lambda error's Cause is the JSON of errorMessage/errorType/stackTrace
        lambda_error = json.loads(cause)
    except ValueError:
        lambda_error = None
    if isinstance(lambda_error, Mapping) and isinstance(lambda_error.get("errorMessage"), str):
        cause = lambda_error["errorMessage"]
    return {"Error": str(error.get("Error", "")), "Cause": cause}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
