"""The report of one execution (docs/contract.md, "Report") from the whole state data.

It is built on every path, so it assumes nothing about the state's shape: no plan (prepare
failed), no snapshots yet, a failure after a relaunch, or the warnings chain (new snapshots
delivered, then a later task failed: `outcome` succeeded-with-warnings and `warning`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast, get_args

from compactor import contract, direct_snapshots, sizing, snapshots
from compactor.config import Config
from compactor.models import (
    ErrorInfo,
    Estimate,
    FastSnapshotRestoreState,
    Report,
    ReportOutcome,
    SharingResult,
    SourceRef,
    Target,
    VolumeEstimate,
    VolumeReport,
)

# EBS stores snapshots in blocks of 512 KiB and FullSnapshotSizeInBytes counts whole blocks
EBS_SNAPSHOT_BLOCK_BYTES = contract.dataplane_constant("ebsBlockBytes")

# the phases the state's `timings` holds a start for (contract/tasks.json)
PHASES = contract.phases()
OUTCOMES: tuple[ReportOutcome, ...] = get_args(ReportOutcome)
# state keys holding an error that did not end the execution: the warnings chain's, and the
# error of a teardown that did not finish after the outcome was decided
WARNING_KEYS = ("warning", "teardownError")


def build(state: Mapping[str, Any], now: datetime, config: Config | None = None) -> Report:
    """config: for a dry run's copySeconds (the gp3 throughput of the volumes)."""
    plan = _mapping(state.get("plan"))
    new_ids = _new_snapshot_ids(state)
    existing = snapshots.describe_new(sorted(set(new_ids.values())))
    copied = _copy_summaries(state)
    listed = _block_lists(state)
    direct = _direct_snapshot_ids(state)
    volumes = [
        _volume(volume, new_ids, existing, copied.get(volume["index"], {}), listed, direct)
        for volume in plan.get("volumes", [])
    ]
    new_snapshot_ids = [new_ids[index] for index in sorted(new_ids) if new_ids[index] in existing]
    timings = _timings(state.get("timings"))
    start = timings.get("start")
    dry_run = plan.get("dryRun") is True
    if dry_run:
        for volume in volumes:
            volume["estimate"] = _volume_estimate(volume, copied, plan, config)
    return {
        "outcome": _outcome(state),
        "executionName": state.get("executionName") or plan.get("executionName"),
        "target": _target(plan, state.get("input")),
        "source": plan.get("source") or _source_from_input(state.get("input")),
        "volumes": volumes,
        "imageId": _mapping(state.get("image")).get("imageId"),
        "fastSnapshotRestore": _fast_snapshot_restore(state),
        "phaseSeconds": phase_seconds(timings, now),
        "totalSeconds": round((now - start).total_seconds(), 3) if start else None,
        "error": _error(state.get("error")),
        "warnings": [w for w in (_error(state.get(key)) for key in WARNING_KEYS) if w],
        "delivered": _delivered(state, new_ids, new_snapshot_ids, existing),
        "newSnapshotIds": new_snapshot_ids,
        "notes": _notes(plan, state),
        "sharing": _sharing(state),
        "dryRun": dry_run,
        "estimate": _estimate([v.get("estimate") for v in volumes]) if dry_run else None,
    }


def _volume_estimate(
    volume: VolumeReport,
    copied: Mapping[int, Mapping[str, Any]],
    plan: Mapping[str, Any],
    config: Config | None,
) -> VolumeEstimate | None:
    """A dry run's estimate of one volume from its inspect entry (docs/workflow.md, "Dry run");
    None when the inspection did not finish."""
    entry = copied.get(volume["index"], {})
    predicted = _int_or_none(entry.get("predicted_blocks"))
    to_read = _int_or_none(entry.get("bytes_to_read"))
    held = volume["heldBlocks"]
    stored = held * EBS_SNAPSHOT_BLOCK_BYTES if held is not None else volume["sourceFullSizeBytes"]
    # only an inspect line's entries have predicted_blocks
    if predicted is None or to_read is None or stored is None:
        return None
    predicted_bytes = predicted * EBS_SNAPSHOT_BLOCK_BYTES
    saved = max(stored - predicted_bytes, 0)
    return {
        "sourceStoredBytes": stored,
        "liveBytes": _int_or_none(entry.get("live_bytes")),
        "predictedStoredBytes": predicted_bytes,
        "predictedSavingsBytes": saved,
        "predictedSavingsPercent": _percent(saved, stored),
        "bytesToRead": to_read,
        "copySeconds": _copy_seconds(to_read, plan, config),
    }


def _copy_seconds(to_read: int, plan: Mapping[str, Any], config: Config | None) -> int | None:
    """At the rate of the types a compaction of these sources would get (a dry run launches the
    smallest ones: sizing.plan), else of the plan's types."""
    verify = plan.get("verify") is not False
    types = [t for t in plan.get("instanceTypes") or [] if isinstance(t, str)]
    copied = _int_or_none(plan.get("bytesToCopy"))
    if config is not None and copied is not None:
        types = sizing.plan(copied, verify, config, refuse=False).instance_types
    if config is None or not types:
        return None
    return sizing.copy_seconds(to_read, types, verify, config)


def _percent(part: int, whole: int) -> float:
    return round(100 * part / whole, 1) if whole > 0 else 0.0


def _estimate(estimates: list[VolumeEstimate | None]) -> Estimate | None:
    """The dry run's totals (the batch compares `estimate.savingsPercent`); None unless every
    volume has its estimate."""
    known = [e for e in estimates if e is not None]
    if not known or len(known) != len(estimates):
        return None
    stored = sum(e["sourceStoredBytes"] for e in known)
    saved = sum(e["predictedSavingsBytes"] for e in known)
    seconds = [e["copySeconds"] for e in known]
    live = [e["liveBytes"] for e in known]
    return {
        "volumes": len(known),
        "sourceStoredBytes": stored,
        "liveBytes": sum(v for v in live if v is not None) if None not in live else None,
        "predictedStoredBytes": sum(e["predictedStoredBytes"] for e in known),
        "predictedSavingsBytes": saved,
        "savingsPercent": _percent(saved, stored),
        "bytesToRead": sum(e["bytesToRead"] for e in known),
        # one volume after the other
        "copySeconds": sum(s for s in seconds if s is not None) if None not in seconds else None,
    }


def _sharing(state: Mapping[str, Any]) -> SharingResult | None:
    """copySharing's result as register_image returned it (None without it, or before it ran)."""
    sharing = _mapping(state.get("image")).get("sharing")
    return cast(SharingResult, sharing) if isinstance(sharing, Mapping) else None


def _notes(plan: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    """The plan's notes, then what copySharing noted or could not copy ($.image.sharing), then
    the pending snapshots teardown had to leave to their timeout ($.teardown.leftToTimeOut)."""
    sharing = _mapping(_mapping(state.get("image")).get("sharing"))
    found = [
        *(plan.get("notes") or []),
        *(sharing.get("notes") or []),
        *(sharing.get("warnings") or []),
    ]
    found.extend(_inconsistent_sources(state))
    left = [str(i) for i in _mapping(state.get("teardown")).get("leftToTimeOut") or []]
    if left:
        found.append(
            f"EC2 refused to delete the pending snapshot(s) {', '.join(left)} (undelivered direct "
            "snapshots of this execution): each turns `error` when nothing has been written to "
            f"it for {direct_snapshots.TIMEOUT_MINUTES} minutes (its StartSnapshot Timeout), and "
            "the stack's sweeper then deletes it; or delete it by hand once it is `error`."
        )
    return [str(n) for n in found if isinstance(n, str)]


def _target(plan: Mapping[str, Any], raw_input: Any) -> Target | None:
    """The plan's target (a plan of before `target` copied to volumes); before a plan (prepare
    failed), the input's or its default (None when the input says something else)."""
    if plan:
        target = plan.get("target", "volume")
        return cast(Target, target) if target in ("snapshot", "volume") else None
    execution_input = _mapping(raw_input)
    target = execution_input.get("target")
    if target is None:
        return "volume" if execution_input.get("method") == "trim" else "snapshot"
    return cast(Target, target) if target in ("snapshot", "volume") else None


def _direct_snapshot_ids(state: Mapping[str, Any]) -> dict[int, str]:
    """start_compaction's direct snapshots by volume index (target snapshot)."""
    items = _mapping(state.get("command")).get("directSnapshots")
    if not isinstance(items, list):
        return {}
    return {
        int(i["index"]): str(i["snapshotId"])
        for i in items
        if isinstance(i, Mapping) and isinstance(i.get("index"), int) and "snapshotId" in i
    }


def _volume(
    volume: Mapping[str, Any],
    new_ids: Mapping[int, str],
    existing: Mapping[str, snapshots.NewSnapshotState],
    summary: Mapping[str, Any],
    listed: Mapping[int, Mapping[str, Any]],
    direct: Mapping[int, str],
) -> VolumeReport:
    """One plan volume: its new snapshot (if it still exists), the direct snapshot the job wrote
    (target snapshot, whether it still exists or not), the copy's counts, its block list."""
    index = volume["index"]
    new_id = new_ids.get(index)
    found = existing.get(new_id) if new_id else None
    new_size = found["fullSizeBytes"] if found else None
    listing = listed.get(index, {})
    return {
        "index": index,
        "sourceSnapshotId": volume["sourceSnapshotId"],
        # a snapshot that teardown deleted after a failure is not reported as new
        "newSnapshotId": new_id if found else None,
        "sourceFullSizeBytes": volume.get("sourceFullSizeBytes"),
        "targetSnapshotId": direct.get(index) or _str_or_none(summary.get("targetSnapshotId")),
        "newFullSizeBytes": new_size,
        "sourceBytesRead": _int_or_none(summary.get("source_bytes_read")),
        "targetBytesWritten": _int_or_none(summary.get("target_bytes_written")),
        "writtenBlocks": (
            (new_size + EBS_SNAPSHOT_BLOCK_BYTES - 1) // EBS_SNAPSHOT_BLOCK_BYTES
            if new_size is not None
            else None
        ),
        "heldBlocks": _int_or_none(listing.get("heldBlocks")),
        "heldBlocksRead": _int_or_none(summary.get("held_blocks_read")),
        "sourceConsistent": _bool_or_none(summary.get("sourceConsistent")),
        "blockListError": (
            str(listing["blockListError"]) if listing.get("blockListError") else None
        ),
    }


def _delivered(
    state: Mapping[str, Any],
    new_ids: Mapping[int, str],
    new_snapshot_ids: list[str],
    existing: Mapping[str, snapshots.NewSnapshotState],
) -> bool:
    """Every new snapshot exists and check_snapshots said completed (or each is tagged
    delivered, when the state lost that answer)."""
    completed = _mapping(state.get("snapshots")).get("completed") is True
    return (
        bool(new_ids)
        and len(new_snapshot_ids) == len(new_ids)
        and (completed or all(existing[i]["delivered"] for i in new_snapshot_ids))
    )


def _block_lists(state: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """list_source_blocks' per-volume results by job index (none before it ran)."""
    volumes = _mapping(state.get("sourceBlocks")).get("volumes")
    if not isinstance(volumes, list):
        return {}
    return {
        v["index"]: v for v in volumes if isinstance(v, Mapping) and isinstance(v.get("index"), int)
    }


def _outcome(state: Mapping[str, Any]) -> ReportOutcome:
    """`$.outcome` as the workflow set it; without one (or an unknown one) it is inferred."""
    raw = state.get("outcome")
    for outcome in OUTCOMES:
        if raw == outcome:
            return outcome
    if state.get("error"):
        return "failure"
    if state.get("warning"):
        return "succeeded-with-warnings"
    return "success"


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
    # the volume pairs: $.attached (attach_volumes) or, from an older workflow, $.ready
    pairs = [
        v
        for key in ("ready", "attached")
        for v in _mapping(state.get(key)).get("volumes", [])
        if isinstance(v, Mapping) and "sourceVolumeId" in v and "index" in v
    ]
    index_by_source = {v["sourceVolumeId"]: v["index"] for v in pairs}
    result: dict[int, Mapping[str, Any]] = {}
    for item in summary.get("volumes", []):
        if isinstance(item, Mapping) and item.get("sourceVolumeId") in index_by_source:
            result[index_by_source[item["sourceVolumeId"]]] = item
    return result


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _inconsistent_sources(state: Mapping[str, Any]) -> list[str]:
    """A note for each volume whose filesystem the data plane found inconsistent (its own
    checker disputed its free-space map): the copy is faithful, raw, and the user should fsck."""
    out = []
    for index, summary in sorted(_copy_summaries(state).items()):
        if summary.get("sourceConsistent") is False:
            notes = [str(n) for n in summary.get("notes") or [] if "inconsistent" in str(n)]
            out.append(
                f"volume {index}: the source filesystem is inconsistent (its own checker "
                "disputes its free-space map), so the affected partitions were copied whole, "
                "as the source has them: check and repair the source filesystem (fsck) and "
                f"compact again for a smaller snapshot. {' '.join(notes)}".strip()
            )
    return out


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


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
