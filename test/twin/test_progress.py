"""The data plane's progress reaches the workflow's state (issue #10): in a real run on the twin,
sparsecopy's progress lines go to the command's stderr log stream (the twin's SSM agent uploads
them in batches, as CloudWatchOutputConfig does in AWS), and every Check compaction output keeps
the latest one in `$.compaction.progress`: null before the first line, then a copy percent that
never falls, and at the end 100 % of the last phase's bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from twin import runs
from twin.emulator import command_logs
from twin.scenario import Options, run

# Polls (a Wait of N s lasts N x 10 ms in the twin) and uploads often enough to see the copy
# under way: its lines every 0.2 s, the agent's batches every 0.3 s, a poll every ~0.1 s + call.
POLL_SECONDS = "10"


def attempt_log(events: Path) -> Path:
    """The live log of the run's (only) launch attempt: a child execution with its own history,
    beside the run's, named by the ExecutionArn of `Run attempt`'s TaskSubmitted."""
    lines = [json.loads(raw) for raw in events.read_text().splitlines()]
    (arn,) = [e["output"]["ExecutionArn"] for e in lines if e["type"] == "TaskSubmitted"]
    return events.with_name(f"{arn.rsplit(':', 1)[1]}.events.jsonl")


def check_compaction_outputs(events: Path) -> list[dict[str, Any]]:
    """$.compaction after each Check compaction, from the attempt's live event log."""
    found = []
    for raw in attempt_log(events).read_text().splitlines():
        event = json.loads(raw)
        if event["type"] == "StateExited" and event["state"] == "Check compaction":
            found.append(event["output"]["compaction"])
    return found


def test_check_compaction_keeps_a_progress_that_rises_to_100(
    cdk_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARSECOPY_PROGRESS_SECONDS", "0.2")
    monkeypatch.setattr(command_logs, "BATCH_SECONDS", 0.3)
    logs: list[Path] = []
    execute = runs.execute

    def with_live_log(*args: Any, **kwargs: Any) -> Any:
        logs.append(tmp_path / f"events-{len(logs)}.jsonl")
        overrides = dict(kwargs.pop("env_overrides", None) or {})
        overrides["COMPACTION_POLL_SECONDS"] = POLL_SECONDS
        kwargs.update(live_log=logs[-1], env_overrides=overrides)
        return execute(*args, **kwargs)

    monkeypatch.setattr(runs, "execute", with_live_log)
    report = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "out"))
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    assert report["leaked_resources"] == 0, report["leaks"]
    outputs = check_compaction_outputs(logs[0])
    assert outputs[-1]["done"] is True
    assert outputs[0]["progress"] is None  # the first poll: the invocation does not exist yet
    seen = [o["progress"] for o in outputs if o["progress"] is not None]
    assert seen, outputs
    copy = [p for p in seen if p["phase"] == "copy (volume 1/1)"]
    percents = [p["percent"] for p in copy]
    print(f"\n{len(outputs)} polls; progress seen: {[(p['phase'], p['percent']) for p in seen]}")
    assert percents == sorted(percents) and all(0 <= p <= 100 for p in percents), percents
    assert copy[-1]["bytesTotal"] > 0
    # A poll may fall after the copy's last line and the verify's first (a loaded machine): the
    # copy's own 100 % is then never seen. What every run ends with is the last phase's 100 %:
    # the agent uploads the last output before it reports the end.
    last = outputs[-1]["progress"]
    assert (last["percent"], last["bytesDone"]) == (100.0, last["bytesTotal"]), last
    # the progress in the state stays once it appeared (carried forward, never lost)
    first = next(i for i, o in enumerate(outputs) if o["progress"] is not None)
    assert all(o["progress"] is not None for o in outputs[first:])
