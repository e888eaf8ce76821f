"""The three ways a twin scenario starts its execution: StartExecution through the API, the tag
trigger (the tag event delivered twice to the deployed rules, as EventBridge may), and the
bad-input cases (one execution each, every one refused before anything is created)."""

from __future__ import annotations

import json
from typing import Any

from . import bad_inputs
from .context import Context, moto_state_machines
from .eventbridge import deliveries
from .execution import ExecutionResult, Machine
from .facts import leaks
from .runs import cleanup_path, dispatch, run_execution
from .source import fingerprints

FSR_ZONE = "us-east-1a"
TAG_DELIVERIES = 2  # EventBridge delivers at least once: the twin delivers the tag event twice


def start_api(ctx: Context) -> ExecutionResult:
    source = ctx.registered
    execution_input: dict[str, Any] = (
        {"snapshotId": source.snapshot_ids[0]}
        if source.kind == "snapshot"
        else {"imageId": source.image_id, "fastSnapshotRestoreAzs": [FSR_ZONE]}
    )
    if ctx.opts.dry_run:
        execution_input["dryRun"] = True
    if ctx.opts.target is not None:
        execution_input["target"] = ctx.opts.target
    return run_execution(ctx, execution_input)


# --- the tag trigger ----------------------------------------------------------------------------


def _not_run_executions(ctx: Context, machine: Machine, seen: set[str]) -> list[Any]:
    out = []
    for sm in moto_state_machines(ctx):
        if sm.arn != machine.arn:
            continue
        for execution in sm.executions:
            if execution.execution_arn not in seen:
                seen.add(execution.execution_arn)
                out.append(execution)
    return out


def _tag_deliveries(ctx: Context, events: list[dict[str, Any]], times: int) -> list[dict[str, Any]]:
    out = []
    for event in events:
        for attempt in range(times):
            for rule, target, target_input in deliveries(
                ctx.d.rules, event, ctx.d.region, ctx.d.account
            ):
                if rule.pattern.get("source") != ["aws.tag"]:
                    continue
                answer = dispatch(ctx, target, target_input)
                out.append({"delivery": attempt + 1, "rule": rule.logical_id, **answer})
    return out


def _started(answer: dict[str, Any]) -> bool:
    """Whether one delivery started an execution: a state machine target always does; a function
    target (start_from_tag) says so in its answer ({"started": bool, ...})."""
    if answer["kind"] == "state machine":
        return True
    output = answer.get("output")
    return bool(output.get("started", True)) if isinstance(output, dict) else False


def _take_tag_events(ctx: Context) -> list[dict[str, Any]]:
    """The tag change events the emulator emitted since the last take."""
    events = list(ctx.emu.state.tag_events)
    ctx.emu.state.tag_events.clear()
    return events


def start_tag(ctx: Context) -> ExecutionResult:
    """Tag the (still pending) snapshot; deliver the tag event twice to the deployed rules'
    targets; run every execution that landed in Step Functions (there must be one)."""
    source = ctx.registered
    # the functions that read it are given it (contract/environment.json), start_from_tag among them
    trigger_key = next(f.env for f in ctx.d.functions.values() if "TRIGGER_TAG_KEY" in f.env)[
        "TRIGGER_TAG_KEY"
    ]
    ctx.emu.state.tag_events.clear()
    ctx.emu.boto3_client("ec2").create_tags(
        Resources=[source.snapshot_ids[0]], Tags=[{"Key": trigger_key, "Value": "true"}]
    )
    events = _take_tag_events(ctx)
    # The trigger tag is the user's change; the workflow must change nothing from here on.
    source.fingerprints = fingerprints(ctx.emu, source)
    answers = _tag_deliveries(ctx, events, TAG_DELIVERIES)
    seen: set[str] = set()
    started = _not_run_executions(ctx, ctx.main, seen)
    ctx.trigger = {
        "events": len(events),
        "deliveries": answers,
        "executions_started": len(started),
        "second_delivery_no_op": len(started) == 1
        and not any(_started(a) for a in answers if a["delivery"] > 1),
    }
    for answer in answers:
        ctx.notes.append(
            f"tag event delivery {answer['delivery']} -> {answer['kind']} {answer['target']}: "
            + json.dumps(answer.get("output") or answer.get("executionArn"))[:200]
        )
    if not started:
        raise RuntimeError(f"tagging the snapshot started no execution: {answers}")
    first = started[0]
    result = run_execution(ctx, json.loads(first.execution_input), name=first.name)
    # Tags the workflow put on its results must not start another compaction.
    _tag_deliveries(ctx, _take_tag_events(ctx), 1)
    ctx.trigger["retriggered_executions"] = len(_not_run_executions(ctx, ctx.main, seen))
    return result


# --- the bad-input cases ------------------------------------------------------------------------


def start_bad_inputs(ctx: Context) -> list[dict[str, Any]]:
    """(case, execution input, the error the workflow must fail with): twin/bad_inputs.py, each
    case run with its cleanup path and checked for what it created."""
    emu = ctx.emu
    cases: list[dict[str, Any]] = []
    for case, bad_input, expected in bad_inputs.cases(emu, ctx.registered.disks[0].path):
        launched_before = len(emu.state.instances_launched)
        volumes_before = len(emu.state.volume_files)
        case_result = run_execution(ctx, bad_input)
        case_cleanup = cleanup_path(ctx, case_result)
        case_leaks = leaks(emu, case_result.name, set(), None)
        cases.append(
            {
                "case": case,
                "input": bad_input,
                "expected_error": expected,
                "execution_status": case_result.status,
                "error": case_result.error,
                "cause": case_result.cause,
                "states_visited": case_result.states_visited,
                "cleanup": [c["status"] for c in case_cleanup],
                "leaked_resources": len(case_leaks),
                "created_nothing": len(emu.state.instances_launched) == launched_before
                and len(emu.state.volume_files) <= volumes_before
                and not case_leaks,
            }
        )
    return cases
