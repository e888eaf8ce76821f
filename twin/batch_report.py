"""out/demo/batch-report.json: what one batch in the twin did, item by item (from the Map Run's
records and each child execution), the totals, the concurrency seen, what leaked over the whole
batch, and where the batch's own reports are in S3 (ResultWriter's manifest, summarize_batch's
batch-report.json). Stored bytes are the emulator's own count of each snapshot's written 512 KiB
blocks (what EBS stores), not what the workflow reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.s3.models import s3_backends

from .checks import run_label
from .context import Context
from .emulator.blockstore import EBS_BLOCK, written_chunks
from .facts import OBJECT_LEAK, direct_writes, leaks
from .iam.check import check_calls

if TYPE_CHECKING:
    from .batch import BatchRun

RESULTS_PREFIX = "batches/"
MIB = 1024 * 1024


def stored_bytes(ctx: Context, snapshot_ids: list[str]) -> int | None:
    """The bytes EBS stores for these snapshots (written blocks x 512 KiB); None if one is gone."""
    total = 0
    for sid in snapshot_ids:
        if sid not in ctx.emu.ec2.snapshots:
            return None
        total += len(written_chunks(ctx.emu.snapshot_file(sid))) * EBS_BLOCK
    return total


def _child_report(ctx: Context, name: str) -> Any:
    """The workflow's own report of a child (its Report task's result, also on failure)."""
    path = ctx.logdir / f"{name}.result.json"
    return json.loads(path.read_text()).get("workflowReport") if path.exists() else None


# the main workflow's report outcomes (ReportOutcome) as batch item outcomes (batch-report.json)
ITEM_OUTCOMES = {"success": "succeeded", "failure": "failed"}


def _outcome(record: dict[str, Any], report: Any) -> str:
    if record["status"] == "PENDING":
        return "not-run"
    if record["status"] != "SUCCEEDED":
        return "failed"
    if isinstance(record.get("output"), dict) and record["output"].get("skipped"):
        return "skipped"
    raw = report.get("outcome") if isinstance(report, dict) else None
    return ITEM_OUTCOMES.get(str(raw), str(raw)) if raw else "succeeded"


def item_row(
    ctx: Context, record: dict[str, Any], children: dict[str, Any], t0: int
) -> dict[str, Any]:
    item = record.get("item") or {}
    name = str(item.get("childName"))
    child = children.get(name) or {}
    report = child.get("output") if child.get("status") == "SUCCEEDED" else _child_report(ctx, name)
    volumes = (report or {}).get("volumes") or [] if isinstance(report, dict) else []
    new_ids = [v["newSnapshotId"] for v in volumes if v.get("newSnapshotId")]
    outcome = _outcome(record, report)
    done = outcome in ("succeeded", "succeeded-with-warnings")
    sources = [item["id"]] if item.get("kind", "snapshot") == "snapshot" else []
    before = stored_bytes(ctx, sources) if done else None
    after = stored_bytes(ctx, new_ids) if done else None
    return {
        "id": item.get("id"),
        "outcome": outcome,
        "child_execution": name,
        "child_status": child.get("status"),
        "map_item_status": record["status"],
        "error": record.get("error"),
        "cause": (record.get("cause") or "")[:500] or None,
        "child_error": child.get("error"),
        "new_snapshot_ids": new_ids,
        "stored_bytes_before": before,
        "stored_bytes_after": after,
        "bytes_saved": before - after if before is not None and after is not None else None,
        "started_seconds": round((record["startedAt"] - t0) / 1000, 1)
        if record.get("startedAt")
        else None,
        "seconds": round((record["stoppedAt"] - record["startedAt"]) / 1000, 1)
        if record.get("stoppedAt") and record.get("startedAt")
        else None,
    }


def max_overlap(spans: list[tuple[int, int]]) -> int:
    """The most spans (start, stop) open at one moment."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    done = [
        r
        for r in rows
        if r["stored_bytes_after"] is not None and r["stored_bytes_before"] is not None
    ]
    before = sum(r["stored_bytes_before"] for r in done)
    after = sum(r["stored_bytes_after"] for r in done)
    count = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("failed", "skipped", "not-run")}
    return {
        "items": len(rows),
        "succeeded": sum(
            1 for r in rows if r["outcome"] in ("succeeded", "succeeded-with-warnings")
        ),
        "failed": count["failed"],
        "skipped": count["skipped"],
        "not_run": count["not-run"],
        "stored_bytes_before": before,
        "stored_bytes_after": after,
        "bytes_saved": before - after,
    }


def batch_leaks(ctx: Context, ran: BatchRun, kept: set[str]) -> list[str]:
    """facts.leaks over the whole batch (each child's name), without the batch's own results
    (batches/ objects: the ResultWriter's files and batch-report.json are its deliverables)."""
    found: list[str] = []
    names = [c["name"] for c in ran.result.child_executions] or [ran.name]
    for name in names:
        for leak in leaks(ctx.emu, name, kept, None):
            if leak.startswith(OBJECT_LEAK) and f"/{RESULTS_PREFIX}" in leak:
                continue
            if leak not in found:
                found.append(leak)
    return found


def s3_reports(ctx: Context, ran: BatchRun) -> dict[str, Any]:
    """Where the batch's reports are: the ResultWriter manifest and summarize_batch's report."""
    runs = ran.result.map_runs
    writer = runs[0].get("resultWriterDetails") if runs else None
    report = None
    key = f"{RESULTS_PREFIX}{ran.name}/batch-report.json"
    for bucket in s3_backends[ctx.d.account]["aws"].buckets.values():
        if key in bucket.keys:
            body = json.loads(bucket.keys[key].value)
            report = {
                "bucket": bucket.name,
                "key": key,
                "outcome": body.get("outcome"),
                "totals": body.get("totals"),
            }
    return {"result_writer_manifest": writer, "batch_report": report}


def agrees(workflow_totals: dict[str, Any] | None, counted: dict[str, int]) -> bool | None:
    """Whether summarize_batch's totals (batch-report.json in S3) are the emulator's own count of
    items and stored bytes; None without that report."""
    if not workflow_totals:
        return None
    pairs = [
        ("items", "items"),
        ("succeeded", "succeeded"),
        ("failed", "failed"),
        ("storedBytesBefore", "stored_bytes_before"),
        ("storedBytesAfter", "stored_bytes_after"),
    ]
    return all(workflow_totals.get(theirs) == counted[ours] for theirs, ours in pairs)


def iam_denials(ctx: Context) -> list[str]:
    """Every call of the batch's functions and its children so far, against the synthesized
    roles (and which statements allowed them: twin/iam/usage.py)."""
    return [str(d) for d in check_calls(ctx.emu.calls_path, ctx.d, usage_from=run_label(ctx))]


def build(ctx: Context, ran: BatchRun, seconds: float) -> dict[str, Any]:
    result = ran.result
    map_run = result.map_runs[0] if result.map_runs else {}
    t0 = map_run.get("startedAt") or 0
    children = {c["name"]: c for c in result.child_executions}
    rows = [item_row(ctx, r, children, t0) for r in map_run.get("items", [])]
    kept = {
        sid for r in rows for sid in r["new_snapshot_ids"] if r["stored_bytes_after"] is not None
    }
    found = batch_leaks(ctx, ran, kept)
    s3 = s3_reports(ctx, ran)
    summary = result.output if isinstance(result.output, dict) else {}
    counted = totals(rows)
    computed = (
        "succeeded"
        if counted["succeeded"] == len(rows)
        else ("partial" if counted["succeeded"] else "failed")
    )
    return {
        "batch_execution_name": ran.name,
        "batch_execution_arn": result.execution_arn,
        "state_machine": ran.machine.name,
        "workflow": "template"
        if ran.machine.logical_id != "TwinHandwrittenBatch"
        else "hand-written",
        "execution_status": result.status,
        "error": result.error,
        "cause": result.cause,
        "outcome": summary.get("outcome") or (s3["batch_report"] or {}).get("outcome") or computed,
        "items": rows,
        "totals": counted,
        "iam_denials": iam_denials(ctx),
        "max_concurrency": map_run.get("maxConcurrency"),
        "tolerated_failure_percentage": map_run.get("toleratedFailurePercentage"),
        "map_run_arn": map_run.get("mapRunArn"),
        "map_run_error": map_run.get("error"),
        "max_running_children": max_overlap(
            [
                (c["startedAt"], c["stoppedAt"])
                for c in result.child_executions
                if c.get("stoppedAt")
            ]
        ),
        "child_executions": len(result.child_executions),
        "cleanup_runs": [
            {k: c.get(k) for k in ("rule", "kind", "status", "error")} for c in ran.cleanup
        ],
        "leaked_resources": len(found),
        "leaks": found,
        "s3": s3,
        "s3_report_agrees": agrees((s3["batch_report"] or {}).get("totals"), counted),
        "batch_input": ran.batch_input,
        "summary": summary or None,
        "states_visited": result.states_visited,
        "batch_seconds": round(ran.seconds, 1),
        "twin_seconds": round(seconds, 1),
        # the children's EBS direct writes together (their account's quota: puts_over_quota)
        "direct_writes": direct_writes(ctx.emu),
    }


def write(report: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "batch-report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    report["path"] = str(out_dir / "batch-report.json")
    return report


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f} MiB"


def summary_lines(report: dict[str, Any]) -> str:
    """What `make demo BATCH=N` prints."""
    t = report["totals"]
    lines = [
        f"twin batch demo: {t['items']} items ({report['workflow']} batch workflow "
        f"{report['state_machine']})",
        f"  execution        {report['batch_execution_name']}: {report['execution_status']}"
        + (f" with {report['error']}" if report.get("error") else ""),
        f"  outcome          {report['outcome']}: {t['succeeded']} succeeded, "
        f"{t['failed']} failed, {t['skipped']} skipped, {t['not_run']} not run",
        f"  concurrency      limit {report['max_concurrency']}; children running at once at most "
        f"{report['max_running_children']}",
    ]
    for row in report["items"]:
        lines.append(
            f"  item {row['id']:<22} {row['outcome']:<10} {_mib(row['stored_bytes_before'])} -> "
            f"{_mib(row['stored_bytes_after'])} in {row['seconds']} s"
            + (f" ({row['child_error'] or row['error']})" if row["outcome"] == "failed" else "")
        )
    lines += [
        f"  stored bytes     {_mib(t['stored_bytes_before'])} -> {_mib(t['stored_bytes_after'])} "
        f"(saved {_mib(t['bytes_saved'])})",
        f"  cleanup          {len(report['cleanup_runs'])} run(s): "
        + (", ".join(f"{c['kind']} {c['status']}" for c in report["cleanup_runs"]) or "none"),
        f"  leaked resources {report['leaked_resources']}"
        + (f": {report['leaks']}" if report["leaks"] else ""),
    ]
    direct = report.get("direct_writes") or {}
    if direct.get("snapshots_started"):
        lines.append(
            f"  direct writes    {direct['snapshots_started']} snapshot(s), "
            f"{direct['puts_accepted']} blocks put, {direct['puts_over_quota']} puts over the "
            "account's put quota (throttled)"
        )
    writer = report["s3"]["result_writer_manifest"]
    if writer:
        lines.append(f"  map results      s3://{writer['Bucket']}/{writer['Key']}")
    s3_report = report["s3"]["batch_report"]
    lines.append(
        f"  batch report     s3://{s3_report['bucket']}/{s3_report['key']} (its totals "
        f"{'agree with' if report['s3_report_agrees'] else 'DIFFER from'} the twin's count)"
        if s3_report
        else "  batch report     (none in S3: the workflow has no summarize_batch step)"
    )
    lines.append(f"  twin seconds     {report['twin_seconds']} (batch {report['batch_seconds']})")
    lines.append(f"  report           {report['path']}")
    return "\n".join(lines)
