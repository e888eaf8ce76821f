"""Running executions in a twin scenario: one execution with the runner (recorded in moto, where
StartExecution put it), an event delivered to a rule target as EventBridge does, and the cleanup
path EventBridge starts after a failed run."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .context import Context, moto_state_machines
from .emulator.faults import EBS_BEHAVIOURS
from .eventbridge import deliveries, status_change_event
from .execution import MS_PER_AWS_SECOND, ExecutionResult, Machine, execute, invoke_function

END_STATUSES_CLEANED = ("FAILED", "TIMED_OUT", "ABORTED")
# OS=debian copies a 2 GiB disk with verify in real seconds at loop-device speed, while its
# compaction bound (the plan's fixed overhead) shrinks to about 10 s at MS_PER_AWS_SECOND: the
# scenario gave up mid-copy (CompactionTimedOut in the fresh-clone run of 3221617). Its Waits
# last longer instead; the poll counts stay the plan's.
DEBIAN_MS_PER_AWS_SECOND = 5 * MS_PER_AWS_SECOND
# An EBS behaviour fault (FAULT=ebs-long-seal, ebs-account-quota, ...) slows the data plane in real
# seconds (a 20 s seal, puts at 20/s): at MS_PER_AWS_SECOND that is hours of AWS time against the
# plan's budget (CompactionTimedOut), a twin artifact. Its Waits last 10x longer (a 20 s seal is
# then about 3 AWS minutes); the poll counts stay the plan's.
EBS_BEHAVIOUR_MS_PER_AWS_SECOND = 10 * MS_PER_AWS_SECOND


def execution_name() -> str:
    return f"twin-{uuid.uuid4().hex[:12]}"


def run_execution(
    ctx: Context,
    execution_input: Any,
    name: str | None = None,
    machine: Machine | None = None,
    fault: bool = True,
) -> ExecutionResult:
    machine = machine or ctx.main
    result = execute(
        ctx.emu, ctx.d, execution_input, name or execution_name(), ctx.logdir,
        env_overrides=ctx.env_overrides, throttled_calls_per_function=ctx.throttled,
        wait_ms=ctx.opts.wait_ms, faults=ctx.state_faults if fault else None, machine=machine,
        machines=ctx.machines, ms_per_aws_second=_ms_per_aws_second(ctx),
    )  # fmt: skip
    _record_in_moto(ctx, result)
    return result


def _ms_per_aws_second(ctx: Context) -> int:
    if ctx.fault in EBS_BEHAVIOURS:
        return EBS_BEHAVIOUR_MS_PER_AWS_SECOND
    return DEBIAN_MS_PER_AWS_SECOND if ctx.opts.os == "debian" else MS_PER_AWS_SECOND


def _record_in_moto(ctx: Context, result: ExecutionResult) -> None:
    """An execution started through moto (StartExecution) ends as the runner says."""
    for sm in moto_state_machines(ctx):
        for execution in sm.executions:
            if execution.execution_arn == result.execution_arn:
                execution.status = result.status
                execution.output = json.dumps(result.output)


def dispatch(ctx: Context, target: dict[str, Any], target_input: Any) -> dict[str, Any]:
    """Deliver one event to one rule target as EventBridge does: a state machine target is
    StartExecution (lands in moto; run by the caller), a function target is invoked."""
    arn = target.get("Arn")
    if arn in ctx.machines:
        started = ctx.emu.boto3_client("stepfunctions").start_execution(
            stateMachineArn=arn, input=json.dumps(target_input)
        )
        return {"target": arn, "kind": "state machine", "executionArn": started["executionArn"]}
    if arn in ctx.d.functions:
        result = invoke_function(
            ctx.emu, ctx.d, arn, target_input, f"invoke-{uuid.uuid4().hex[:8]}", ctx.logdir
        )
        return {
            "target": arn,
            "kind": "function",
            "handler": ctx.d.functions[arn].handler,
            "status": result.status,
            "error": result.error,
            "output": result.output,
        }
    return {"target": arn, "kind": "unsupported", "note": "the twin delivers to Lambda and SFN"}


def cleanup_path(ctx: Context, result: ExecutionResult) -> list[dict[str, Any]]:
    """After FAILED, TIMED_OUT or ABORTED: the "Execution Status Change" event, matched against
    the deployed rules, each target run as EventBridge would start it (a state machine target
    with the runner, a function target invoked)."""
    if result.status not in END_STATUSES_CLEANED:
        return []
    event = status_change_event(
        ctx.d.region, ctx.d.account, result.execution_arn, result.state_machine_arn,
        result.name, result.status, result.input,
    )  # fmt: skip
    runs = []
    for rule, target, target_input in deliveries(ctx.d.rules, event, ctx.d.region, ctx.d.account):
        arn = target.get("Arn")
        entry: dict[str, Any] = {"rule": rule.logical_id, "target": arn, "input": target_input}
        if arn in ctx.machines:
            cleanup = run_execution(ctx, target_input, name=f"cleanup-{uuid.uuid4().hex[:8]}",
                                    machine=ctx.machines[arn], fault=False)  # fmt: skip
            entry.update(kind="state machine", name=cleanup.name, status=cleanup.status,
                         error=cleanup.error, cause=cleanup.cause, output=cleanup.output,
                         states_visited=cleanup.states_visited)  # fmt: skip
        else:
            entry.update(dispatch(ctx, target, target_input))
        runs.append(entry)
    return runs
