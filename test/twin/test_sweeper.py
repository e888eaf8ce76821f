"""The sweeper in the twin: an execution aborted in the middle, with no cleanup path run after it
(as if the cleanup rule's delivery was lost), leaves its transfer instance and volumes; the
deployed sweep function keeps them within the grace period, and the sweeper run past the grace
period removes them: nothing leaks."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from twin.context import setup
from twin.emulator.consistency import TAG_LAG_CALLS
from twin.emulator.faults import Faults, parse
from twin.emulator.server import Emulator
from twin.execution import invoke_function
from twin.facts import facts
from twin.options import Options
from twin.starts import start_api

SWEEP_HANDLER = "compactor.handlers.sweep.handler"


def test_resources_of_an_aborted_execution_are_swept(
    cdk_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = Options(fault="abort@Attach volumes", cdk_out=cdk_out, out_dir=tmp_path / "out",
                   picture=False)  # fmt: skip
    fault = parse(opts.fault)
    with Emulator(tmp_path / "emu", Faults.of(fault)) as emu:
        ctx = setup(emu, opts, fault, tmp_path / "work", tmp_path / "logs")
        result = start_api(ctx)  # and no cleanup path
        assert result.status == "ABORTED", (result.error, result.cause)
        left = facts(emu, result, ctx.registered.image_id).leaks
        assert any(item.startswith("instance ") for item in left), left
        assert any(item.startswith("volume ") for item in left), left

        (sweep_arn,) = [arn for arn, f in ctx.d.functions.items() if f.handler == SWEEP_HANDLER]
        # the deployed function as the schedule invokes it: the execution just ended, so it keeps
        # everything. The emulator's tag filters lag behind new resources (twin/emulator/
        # consistency.py, as EC2's do) for TAG_LAG_CALLS answers: a run may not see them yet.
        runs = []
        for attempt in range(TAG_LAG_CALLS + 1):
            name = f"sweep-now-{attempt}"
            kept = invoke_function(emu, ctx.d, sweep_arn, {}, name, tmp_path / "logs")
            assert kept.status == "SUCCEEDED", (kept.error, kept.cause)
            assert kept.output["removed"] == 0
            runs.append(kept.output["executions"])
        assert runs[0] == [], "the first run should not see resources that new"
        (entry,) = runs[-1]
        assert (entry["executionName"], entry["status"]) == (result.name, "NOT_FOUND")
        assert entry["action"] == "kept-grace"
        assert set(entry["found"]) >= {"instance", "volume"}
        assert facts(emu, result, ctx.registered.image_id).leaks == left

        # past the grace period: the same code with the function's environment, its clock moved on
        swept = _sweep_later(emu, ctx.d.functions[sweep_arn].env, monkeypatch, hours=3)
        (entry,) = swept["executions"]
        assert (entry["action"], entry["teardownOutcome"]) == ("sweep", "cleanup")
        assert {r["type"] for r in entry["removed"]} >= {"instance", "volume"}
        # the terminated instance detaches its volumes; the next run removes what was still busy
        for _ in range(5):
            if not swept["remaining"]:
                break
            swept = _sweep_later(emu, ctx.d.functions[sweep_arn].env, monkeypatch, hours=3)
        assert facts(emu, result, ctx.registered.image_id).leaks == []


def _sweep_later(
    emu: Emulator, env: dict[str, str], monkeypatch: pytest.MonkeyPatch, hours: float
) -> Any:
    from compactor import aws, sweeper

    for name, value in {**env, **emu.client_env()}.items():
        monkeypatch.setenv(name, value)
    aws.reset_clients()
    try:
        return sweeper.sweep(
            sweeper.SweepConfig.from_env(os.environ), datetime.now(UTC) + timedelta(hours=hours)
        )
    finally:
        aws.reset_clients()
