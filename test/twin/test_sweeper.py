"""The sweeper in the twin: an execution aborted in the middle, with no cleanup path run after it
(as if the cleanup rule's delivery was lost), leaves its transfer instance and volumes; the
deployed sweep function keeps them within the grace period, and the sweeper run past the grace
period removes them: nothing leaks. Every call the sweeper made (as the sweep function, through the
emulator's IAM recorder) is allowed by the synthesized sweep role, and removing a grant is
caught."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from twin import later
from twin.context import setup
from twin.emulator.consistency import TAG_LAG_CALLS
from twin.emulator.faults import Faults, parse
from twin.emulator.server import Emulator
from twin.execution import invoke_function
from twin.facts import facts
from twin.iam import check as iam_check
from twin.options import Options
from twin.starts import start_api

SWEEP_HANDLER = "compactor.handlers.sweep.handler"


def test_resources_of_an_aborted_execution_are_swept(cdk_out: Path, tmp_path: Path) -> None:
    opts = Options(fault="abort@Attach volumes", cdk_out=cdk_out, out_dir=tmp_path / "out",
                   picture=False, diskless=True)  # fmt: skip
    fault = parse(opts.fault)
    with Emulator(tmp_path / "emu", Faults.of(fault), diskless=True) as emu:
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
        swept = _sweep_later(emu, ctx.d.functions[sweep_arn], hours=3)
        (entry,) = swept["executions"]
        assert (entry["action"], entry["teardownOutcome"]) == ("sweep", "cleanup")
        assert {r["type"] for r in entry["removed"]} >= {"instance", "volume"}
        # the terminated instance detaches its volumes; the next run removes what was still busy
        for _ in range(5):
            if not swept["remaining"]:
                break
            swept = _sweep_later(emu, ctx.d.functions[sweep_arn], hours=3)
        assert facts(emu, result, ctx.registered.image_id).leaks == []
        # and every call of the sweep function (Describe*, DescribeExecution, the teardown's
        # TerminateInstances/DeleteVolume with the stack tag, the bucket) is allowed by its role
        sweep_name = ctx.d.functions[sweep_arn].name
        calls = [c for c in iam_check.load_calls(emu.calls_path) if c["caller"] == sweep_name]
        actions = {f"{c['service']}:{c['action']}" for c in calls}
        assert {"ec2:DescribeInstances", "states:DescribeExecution", "ec2:TerminateInstances",
                "ec2:DeleteVolume", "s3:DeleteObjects"} <= actions, sorted(actions)  # fmt: skip
        denials = iam_check.check_calls(
            emu.calls_path, ctx.d, cdk_out=cdk_out, usage_from="the sweep of a failed run"
        )
        assert denials == [], "\n".join(map(str, denials))
        # the check can fail: without DescribeExecution and DeleteVolume the sweep role is denied
        for removed in ("states:DescribeExecution", "ec2:DeleteVolume"):
            denied = iam_check.check_calls(
                emu.calls_path, ctx.d, cdk_out=cdk_out,
                edit_policies=iam_check.without_action(removed),
            )  # fmt: skip
            assert {(d.caller, d.action) for d in denied} >= {(sweep_name, removed)}, denied


def _sweep_later(emu: Emulator, function: Any, hours: float) -> Any:
    """sweeper.sweep with the function's environment and identity (twin/later.py): every request
    carries the X-Twin-Caller header of the sweep function, so the IAM check judges it by the
    sweep role."""
    with later.as_the_function(emu, function):
        from compactor import sweeper

        return sweeper.sweep(
            sweeper.SweepConfig.from_env(os.environ), datetime.now(UTC) + timedelta(hours=hours)
        )
