"""What `--wait` shows, read from an execution's history events (pure: no AWS calls here).

The workflow marks each phase with a Pass state named "<Phase> phase"
(lib/workflow-building-blocks.ts markPhase; the phases are contract/tasks.json `phases`), and
`Check compaction` keeps the data plane's last progress line in its result:
`$.compaction.progress` = {phase, percent, bytesDone, bytesTotal, etaSeconds, at}, null before
the first line.

Each launch attempt is a child execution (lib/attempt-workflow.ts, started by the workflow's
`Run attempt` Task with startExecution.sync:2): its phases and `Check compaction` are in its own
history, not the workflow's. The workflow's history names it in the Task's TaskSubmitted event
(the StartExecution response: ExecutionArn); a relaunch submits a new one, and the newest is the
one to follow (`Progress.attempt_arn`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PHASE_SUFFIX = " phase"
CHECK_COMPACTION = "Check compaction"
# delivered, then something that is not a deliverable failed: a success with its own exit code
WARNINGS_OUTCOME = "succeeded-with-warnings"
SUCCESS_OUTCOMES = ("success", WARNINGS_OUTCOME, "estimated")
BATCH_SUCCESS_OUTCOMES = ("succeeded",)


@dataclass
class Progress:
    """What the client knows of a running execution; each update says what changed."""

    phase: str | None = None
    # a batch: its Task and Map states are its steps (its history holds only its own states;
    # each item runs as a child execution), announced as `step: <name>`
    steps: bool = False
    step: str | None = None
    copy: dict[str, Any] | None = None
    map_run_arn: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    last_event_id: int = 0
    # the newest launch attempt (a child execution) and, by attempt, the last event id read
    attempt_arn: str | None = None
    attempt_event_ids: dict[str, int] = field(default_factory=dict)

    def apply(self, events: list[dict[str, Any]], attempt: str | None = None) -> list[str]:
        """Take new history events (oldest first) of the execution, or of its launch attempt
        `attempt`; return the lines to print: every phase change, and of the copy lines only the
        newest (one poll may read many)."""
        lines: list[str] = []
        for event in events:
            event_id = int(event.get("id", 0))
            if attempt is None:
                self.last_event_id = max(self.last_event_id, event_id)
            else:
                self.attempt_event_ids[attempt] = max(
                    self.attempt_event_ids.get(attempt, 0), event_id
                )
            line = self._apply_one(event)
            if line:
                lines.append(line)
        copies = [i for i, line in enumerate(lines) if line.split(":")[0] not in ("phase", "step")]
        return [line for i, line in enumerate(lines) if i not in copies[:-1]]

    def _apply_one(self, event: dict[str, Any]) -> str | None:
        kind = event.get("type", "")
        if kind == "MapRunStarted":
            self.map_run_arn = event.get("mapRunStartedEventDetails", {}).get("mapRunArn")
            return None
        if kind == "TaskSubmitted":
            self.attempt_arn = started_child(event) or self.attempt_arn
            return None
        if kind.endswith("StateEntered"):
            name = event.get("stateEnteredEventDetails", {}).get("name", "")
            if self.steps and kind in ("TaskStateEntered", "MapStateEntered") and name != self.step:
                self.step = name
                return f"step: {name}"
            if name.endswith(PHASE_SUFFIX) and name[: -len(PHASE_SUFFIX)] != self.phase:
                self.phase = name[: -len(PHASE_SUFFIX)]
                return f"phase: {self.phase}"
            return None
        if kind.endswith("StateExited"):
            details = event.get("stateExitedEventDetails", {})
            if details.get("name") == CHECK_COMPACTION:
                return self._copy_progress(details.get("output"))
        return None

    def _copy_progress(self, output: str | None) -> str | None:
        progress = compaction_progress(output)
        if progress is None or progress == self.copy:
            return None
        self.copy = progress
        return format_copy(progress)

    def counts_line(self, counts: dict[str, int]) -> str | None:
        """A batch's item counts (DescribeMapRun itemCounts) when they changed."""
        keep = {k: int(v) for k, v in counts.items() if k != "resultsWritten"}
        if keep == self.counts:
            return None
        self.counts = keep
        return format_counts(keep)


def started_child(event: dict[str, Any]) -> str | None:
    """The ExecutionArn of a TaskSubmitted event of a StartExecution Task (.sync), or None."""
    details = event.get("taskSubmittedEventDetails", {})
    if details.get("resourceType") != "states":
        return None
    if not str(details.get("resource", "")).startswith("startExecution"):
        return None
    try:
        answer = json.loads(details.get("output") or "null")
    except json.JSONDecodeError:
        return None
    arn = answer.get("ExecutionArn") if isinstance(answer, dict) else None
    return arn if isinstance(arn, str) else None


def compaction_progress(output: str | None) -> dict[str, Any] | None:
    """`compaction.progress` of a `Check compaction` state output (a JSON string), or None."""
    if not output:
        return None
    try:
        state = json.loads(output)
    except json.JSONDecodeError:
        return None
    compaction = state.get("compaction") if isinstance(state, dict) else None
    progress = compaction.get("progress") if isinstance(compaction, dict) else None
    return progress if isinstance(progress, dict) else None


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_copy(progress: dict[str, Any]) -> str:
    """e.g. `copy: 42.0% 1.2 GiB of 2.9 GiB, about 3m10s left`."""
    phase = progress.get("phase") or "copy"
    parts = [f"{phase}:"]
    percent = progress.get("percent")
    if isinstance(percent, int | float):
        parts.append(f"{percent:.1f}%")
    done, total = progress.get("bytesDone"), progress.get("bytesTotal")
    if isinstance(done, int | float) and isinstance(total, int | float):
        parts.append(f"{format_bytes(done)} of {format_bytes(total)}")
    line = " ".join(parts)
    eta = progress.get("etaSeconds")
    if isinstance(eta, int | float):
        line += f", about {format_duration(eta)} left"
    return line


def format_counts(counts: dict[str, int]) -> str:
    """e.g. `items: 3 total, 1 running, 1 succeeded, 1 failed`."""
    order = ("total", "pending", "running", "succeeded", "failed", "timedOut", "aborted")
    shown = [f"{counts[k]} {k}" for k in order if counts.get(k) or k == "total"]
    return "items: " + ", ".join(shown)


def outcome_of(output: Any) -> str | None:
    """The report's (or batch summary's) outcome, if the output has one."""
    return output.get("outcome") if isinstance(output, dict) else None


def summary_line(status: str, output: Any, error: str | None, cause: str | None) -> str:
    """The last line of `--wait` (and of `status`)."""
    if status == "SUCCEEDED":
        outcome = outcome_of(output)
        line = f"SUCCEEDED outcome={outcome}" if outcome else "SUCCEEDED"
        totals = output.get("totals") if isinstance(output, dict) else None
        if isinstance(totals, dict):
            line += " " + " ".join(f"{k}={v}" for k, v in totals.items())
        elif isinstance(output, dict) and output.get("newSnapshotIds"):
            line += " new snapshots: " + ", ".join(map(str, output["newSnapshotIds"]))
        return line
    if status == "RUNNING":
        return "RUNNING"
    return f"{status} error={error or '-'} cause={_short(cause)}"


def _short(cause: str | None, limit: int = 500) -> str:
    if not cause:
        return "-"
    try:  # a Lambda error's cause is JSON with errorMessage
        loaded = json.loads(cause)
        if isinstance(loaded, dict) and "errorMessage" in loaded:
            cause = str(loaded["errorMessage"])
    except json.JSONDecodeError:
        pass
    return cause if len(cause) <= limit else cause[: limit - 3] + "..."
