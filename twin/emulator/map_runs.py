"""Step Functions' ListMapRuns and DescribeMapRun for the twin's Distributed Map runs.

The runner (twin/runner/distributed_map.mjs) runs each Map Run itself and POSTs its record to
`/_twin/map-run` when it starts and when it ends (injection.py); moto 5.2.5 answers ListMapRuns
with nothing and DescribeMapRun with {}, so both are answered here from those records, in the API's
shapes (summarize_batch finds a failed Map's run with ListMapRuns)."""

from __future__ import annotations

import datetime
from typing import Any

from moto.stepfunctions.exceptions import ResourceNotFound
from moto.stepfunctions.models import StepFunctionBackend

from . import patching
from . import state as st

_orig: dict[str, Any] = {}
STATUSES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING", "RUNNING")


def install() -> None:
    patching.install(
        _orig,
        {
            "list_map_runs": (StepFunctionBackend, "list_map_runs", _list_map_runs),
            "describe_map_run": (StepFunctionBackend, "describe_map_run", _describe_map_run),
        },
    )


def record(emu: st.EmulatorState, run: dict[str, Any]) -> None:
    """Keep (or update) one Map Run as the runner reports it."""
    with emu.lock:
        emu.map_runs[str(run["mapRunArn"])] = run


def _date(ms: Any) -> datetime.datetime | None:
    if not isinstance(ms, int | float):
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _runs() -> dict[str, dict[str, Any]]:
    emu = st.ACTIVE
    return dict(emu.map_runs) if emu is not None else {}


def _list_map_runs(self: StepFunctionBackend, execution_arn: str) -> dict[str, Any]:
    runs = [r for r in _runs().values() if r.get("executionArn") == execution_arn]
    out = []
    for run in runs:
        entry = {
            "executionArn": execution_arn,
            "mapRunArn": run["mapRunArn"],
            "stateMachineArn": run.get("stateMachineArn"),
            "startDate": _date(run.get("startedAt")),
        }
        if run.get("stoppedAt"):
            entry["stopDate"] = _date(run["stoppedAt"])
        out.append(entry)
    return {"mapRuns": out}


def _counts(run: dict[str, Any]) -> dict[str, int]:
    items = run.get("items") or []
    count = {s: sum(1 for i in items if i.get("status") == s) for s in STATUSES}
    return {
        "pending": count["PENDING"],
        "running": count["RUNNING"],
        "succeeded": count["SUCCEEDED"],
        "failed": count["FAILED"],
        "timedOut": count["TIMED_OUT"],
        "aborted": count["ABORTED"],
        "total": len(items),
        "resultsWritten": len(items) if run.get("resultWriterDetails") else 0,
        "failuresNotRedrivable": 0,
        "pendingRedrive": 0,
    }


def _describe_map_run(self: StepFunctionBackend, map_run_arn: str) -> dict[str, Any]:
    run = _runs().get(map_run_arn)
    if run is None:
        raise ResourceNotFound(map_run_arn)
    out: dict[str, Any] = {
        "mapRunArn": map_run_arn,
        "executionArn": run.get("executionArn"),
        "status": run.get("status"),
        "startDate": _date(run.get("startedAt")),
        "maxConcurrency": run.get("maxConcurrency") or 0,
        "toleratedFailurePercentage": float(run.get("toleratedFailurePercentage") or 0),
        "toleratedFailureCount": int(run.get("toleratedFailureCount") or 0),
        "itemCounts": _counts(run),
        "executionCounts": _counts(run),
        "redriveCount": 0,
    }
    if run.get("stoppedAt"):
        out["stopDate"] = _date(run["stoppedAt"])
    return out
