"""Runs one execution of a deployed state machine with the ASL interpreter (twin/runner).

Also what the twin knows of the template's state machines: every one of them (the main workflow
and e.g. the cleanup workflow), their Task states, and which one is the main workflow."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import zygote
from .cfn import Deployment, Resolver, load_template, resolved_definition, resources_of
from .emulator.faults import StateFault
from .emulator.server import Emulator

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "twin" / "runner" / "run.mjs"
# A Wait of N seconds in AWS lasts N x this many ms in the twin (at least wait_ms): poll bounds
# sized for AWS time keep their proportion to copies that take real seconds here (run.mjs).
MS_PER_AWS_SECOND = 10
# The compaction poll's Wait (the one whose seconds come from the plan: SecondsPath) bounds the
# data plane's real work, which runs at this machine's speed: on a busy machine (make test's lanes)
# an AMI's copy of two real disks with its checks outgrew the bound at 10 ms (CompactionTimedOut in
# the sweep's abort@Register image, and in a recording). It lasts 3x longer (at least); the other
# Waits stand for AWS's own asynchronous work, which the emulator's own clocks model.
MS_PER_AWS_SECOND_OF_WORK = 3 * MS_PER_AWS_SECOND


@dataclass
class ExecutionResult:
    name: str
    input: Any
    status: str
    output: Any
    error: str | None
    cause: str | None
    events: list[dict[str, Any]]
    invocations: list[dict[str, Any]]
    workflow_report: Any = None
    states_visited: list[str] = field(default_factory=list)
    state_seconds: list[dict[str, Any]] = field(default_factory=list)
    # the fault of this run when it has exactly one: {kind, state, applied, detail}
    fault: dict[str, Any] | None = None
    # every KIND@STATE fault of this run (FAULT=A+B): [{kind, state, applied, detail}, ...]
    faults: list[dict[str, Any]] = field(default_factory=list)
    execution_arn: str = ""
    state_machine_arn: str = ""
    # batches: each Distributed Map run of this execution (twin/runner/distributed_map.mjs) and
    # each execution its StartExecution tasks started (start_execution.mjs)
    map_runs: list[dict[str, Any]] = field(default_factory=list)
    child_executions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Machine:
    logical_id: str
    arn: str
    name: str
    definition: dict[str, Any]

    def task_states(self) -> list[str]:
        return task_states(self.definition)


START_EXECUTION_SYNC = re.compile(r"^arn:aws:states:::states:startExecution\.sync(:2)?$")


def inlined(machine: Machine, machines: dict[str, Machine]) -> Machine:
    """The machine as one graph, for the twin's analysis of its states (fault KIND@STATE, the
    sweep's plan): each top-level startExecution.sync Task of a machine of `machines` (the
    compaction's launch attempt, run in the runner's process: twin/runner/run.mjs) is replaced by
    that child's states. The Task's name leads to the child's StartAt; the child's Succeed states
    go on to the Task's Next; its Fail states to the Task's catch-all Catch. Used to run, the
    machine stays as it is (the runner starts the child itself)."""
    states: dict[str, Any] = {}
    starts: dict[str, str] = {}
    for name, state in machine.definition.get("States", {}).items():
        started = _sync_children({"States": {name: state}}, machines)
        child = machines[started[0]] if started else None
        if child is None:
            states[name] = state
            continue
        catch_all = [c["Next"] for c in state.get("Catch", []) if "States.ALL" in c["ErrorEquals"]]
        starts[name] = child.definition["StartAt"]
        for inner, inner_state in child.definition.get("States", {}).items():
            if inner in states or inner in machine.definition["States"]:
                raise ValueError(f"state {inner!r} is in {machine.name} and its child {child.name}")
            if inner_state.get("Type") == "Succeed" and state.get("Next"):
                inner_state = {"Type": "Pass", "Next": state["Next"], "Comment": "child ended"}
            elif inner_state.get("Type") == "Fail" and catch_all:
                inner_state = {"Type": "Pass", "Next": catch_all[0], "Comment": "child failed"}
            states[inner] = inner_state
    flat = json.loads(json.dumps({**machine.definition, "States": states}))
    for state in flat["States"].values():
        for holder in [state, *state.get("Choices", []), *state.get("Catch", [])]:
            for key in ("Next", "Default"):
                if holder.get(key) in starts:
                    holder[key] = starts[holder[key]]
    if flat["StartAt"] in starts:
        flat["StartAt"] = starts[flat["StartAt"]]
    return Machine(machine.logical_id, machine.arn, machine.name, flat)


def task_states(definition: dict[str, Any]) -> list[str]:
    """Every Task state of a definition (also inside Parallel and Map), in definition order."""
    out: list[str] = []
    for name, state in definition.get("States", {}).items():
        if state.get("Type") == "Task":
            out.append(name)
        for branch in state.get("Branches", []):
            out += task_states(branch)
        inner = state.get("ItemProcessor") or state.get("Iterator")
        if inner:
            out += task_states(inner)
    return out


def state_machines(d: Deployment, cdk_out: Path) -> dict[str, Machine]:
    """Every state machine of the template, by ARN, its definition resolved like deploy.py does."""
    _, template = load_template(cdk_out)
    r = Resolver(template, d, params=Resolver.parameter_values(template))
    out: dict[str, Machine] = {}
    for logical, res in resources_of(template, "AWS::StepFunctions::StateMachine").items():
        arn = d.arns[logical]
        out[arn] = Machine(
            logical, arn, arn.rsplit(":", 1)[-1], resolved_definition(r, res["Properties"])
        )
    return out


# The stack output that names each role's state machine (lib/compactor-stack.ts).
ROLE_OUTPUTS = {"main": "StateMachineArn", "batch": "BatchStateMachineArn"}


def machine_of_role(cdk_out: Path, machines: dict[str, Machine], role: str) -> Machine | None:
    """The state machine the stack's output for `role` (main, batch) refers to, by logical id;
    None when the template has no such output."""
    _, template = load_template(cdk_out)
    value = template.get("Outputs", {}).get(ROLE_OUTPUTS[role], {}).get("Value")
    logical = None
    if isinstance(value, dict):
        logical = value.get("Ref") or (value.get("Fn::GetAtt") or [None])[0]
    found = [m for m in machines.values() if m.logical_id == logical]
    return found[0] if found else None


def main_machine(
    d: Deployment, machines: dict[str, Machine], cdk_out: Path | None = None
) -> Machine:
    """The main workflow: the state machine the stack's StateMachineArn output names (given
    `cdk_out`); else the state machine no EventBridge rule starts directly (the cleanup workflow
    is a rule's target); with one state machine, that one."""
    if len(machines) == 1:
        return next(iter(machines.values()))
    if cdk_out is not None:
        by_output = machine_of_role(cdk_out, machines, "main")
        if by_output is not None:
            return by_output
    targeted = {t.get("Arn") for rule in d.rules for t in rule.targets}
    candidates = [m for arn, m in machines.items() if arn not in targeted]
    if len(candidates) == 1:
        return candidates[0]
    if d.state_machine_arn in machines:
        return machines[d.state_machine_arn]
    raise RuntimeError(f"cannot tell the main state machine among {sorted(machines)}")


def _durations(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entered: dict[str, float] = {}
    out = []
    for event in events:
        if event["type"] == "StateEntered":
            entered[event["state"]] = event["timestamp"]
        elif event["type"] == "StateExited" and event["state"] in entered:
            start = entered.pop(event["state"])
            out.append(
                {
                    "state": event["state"],
                    "type": event["stateType"],
                    "seconds": round((event["timestamp"] - start) / 1000, 3),
                }
            )
    return out


def execute(
    emu: Emulator,
    deployment: Deployment,
    execution_input: Any,
    name: str,
    logdir: Path,
    env_overrides: dict[str, str] | None = None,
    throttled_calls_per_function: int = 0,
    wait_ms: int = 100,
    ms_per_aws_second: int = MS_PER_AWS_SECOND,
    retry_ms: int = 100,
    timeout_seconds: int = 900,
    fault: StateFault | None = None,
    machine: Machine | None = None,
    faults: list[StateFault] | None = None,
    live_log: Path | None = None,
    machines: dict[str, Machine] | None = None,
) -> ExecutionResult:
    """Run one execution to its end. `machine` defaults to the deployment's state machine.
    `faults` (each fires once, at the first call in its state) or `fault` (one of them).
    `live_log`: a JSON-lines file the runner appends each event to as it happens (the twin's
    GetExecutionHistory reads it while the run goes on: emulator/stepfunctions_twin.py); the run
    aborts when the file beside it with suffix .stop appears (the twin's StopExecution).
    `machines`: the state machines its StartExecution tasks may start (a top-level Task's child,
    the launch attempt, runs in the runner's process with the faults; a Map iteration's child, a
    batch item, as its own runner process without faults: twin/runner/run.mjs)."""
    if machine is None:
        machine = Machine("", deployment.state_machine_arn, deployment.state_machine_name,
                          deployment.definition)  # fmt: skip
    logdir.mkdir(parents=True, exist_ok=True)
    execution_arn = (
        f"arn:aws:states:{deployment.region}:{deployment.account}:execution:{machine.name}:{name}"
    )
    job = {
        "definition": machine.definition,
        "input": execution_input,
        "context": _context_object(deployment, machine, execution_arn, name),
        "functions": _functions(emu, deployment, env_overrides),
        "python": sys.executable,
        "worker": str(zygote.SPAWN),
        "zygote": str(zygote.socket_path()),
        "logDir": str(logdir),
        "waitMs": wait_ms,
        "msPerAwsSecond": ms_per_aws_second,
        "msPerAwsSecondOfWork": max(ms_per_aws_second, MS_PER_AWS_SECOND_OF_WORK),
        "retryMs": retry_ms,
        "throttledCallsPerFunction": throttled_calls_per_function,
        "faults": [f.to_job() for f in (faults or ([fault] if fault is not None else []))],
        "emulatorEndpoint": emu.endpoint,
        "iamCalls": str(emu.iam_recorder.path),  # Step Functions' calls with the machine's role
        "liveEventLog": str(live_log) if live_log is not None else None,
        "stopFile": str(live_log.with_suffix(".stop")) if live_log is not None else None,
        "stateMachines": _machines_of_job(machines or {}),
        "emulatorEnv": emu.client_env(),  # ResultWriter's PutObject (as the state machine's role)
        "validatedDir": str(validated_dir()),
    }
    raw = _run_runner(job, logdir / f"{name}.job.json", logdir / f"{name}.result.json",
                      timeout_seconds)  # fmt: skip
    return _result(raw, name, execution_input, execution_arn, machine)


def _machines_of_job(machines: dict[str, Machine]) -> dict[str, Any]:
    """The job's stateMachines: `inProcess` marks a child a top-level .sync Task starts (the
    launch attempt), which the runner runs in its own process (run.mjs runStates())."""
    children = {arn for m in machines.values() for arn in _sync_children(m.definition, machines)}
    return {
        a: {"arn": a, "name": m.name, "definition": m.definition, "inProcess": a in children}
        for a, m in machines.items()
    }


def _sync_children(definition: dict[str, Any], machines: dict[str, Machine]) -> list[str]:
    """The state machines the top-level startExecution.sync Tasks of `definition` start."""
    out = []
    for state in definition.get("States", {}).values():
        arn = (state.get("Parameters") or {}).get("StateMachineArn")
        sync = START_EXECUTION_SYNC.match(str(state.get("Resource")))
        if state.get("Type") == "Task" and sync and arn in machines:
            out.append(arn)
    return out


_validated_lock = threading.Lock()
_validated: list[Path] = []


def validated_dir() -> Path:
    """Where this process's runners mark each definition they validated, so that the next run of
    it skips the validator's schema compilation (run.mjs validatedMachine()); made on first use,
    removed when the process ends."""
    with _validated_lock:
        if not _validated:
            path = Path(tempfile.mkdtemp(prefix="twin-validated-"))
            atexit.register(shutil.rmtree, path, ignore_errors=True)
            _validated.append(path)
        return _validated[0]


def _result(
    raw: dict[str, Any], name: str, execution_input: Any, execution_arn: str, machine: Machine
) -> ExecutionResult:
    """The runner's result file as an ExecutionResult."""
    events = raw["events"]
    return ExecutionResult(
        name=name,
        input=execution_input,
        status=raw["status"],
        output=raw["output"],
        error=raw["error"],
        cause=raw["cause"],
        events=events,
        invocations=raw["invocations"],
        workflow_report=raw.get("workflowReport"),
        states_visited=[e["state"] for e in events if e["type"] == "StateEntered"],
        state_seconds=_durations(events),
        fault=raw.get("fault"),
        faults=raw.get("faults") or [],
        execution_arn=execution_arn,
        state_machine_arn=machine.arn,
        map_runs=raw.get("mapRuns") or [],
        child_executions=raw.get("childExecutions") or [],
    )


def _context_object(
    deployment: Deployment, machine: Machine, execution_arn: str, name: str
) -> dict[str, Any]:
    """The parts of the Step Functions context object ($$) the definition reads."""
    return {
        "Execution": {
            "Id": execution_arn,
            "Name": name,
            "RoleArn": f"arn:aws:iam::{deployment.account}:role/twin-state-machine",
        },
        "StateMachine": {"Id": machine.arn, "Name": machine.name},
    }


def _functions(
    emu: Emulator, deployment: Deployment, env_overrides: dict[str, str] | None
) -> dict[str, dict[str, Any]]:
    """Each function as the runner's worker runs it: handler, code, environment (the template's,
    the emulator's endpoint and the function's own credentials), memory."""
    env_common = {
        **emu.client_env(),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_DEV": "false",
        **(env_overrides or {}),
    }
    return {
        arn: {
            "name": f.name,
            "handler": f.handler,
            "env": {**f.env, **env_common, **emu.function_credentials(f.name)},
            "codeDir": str(f.code_dir),
            "memory": f.memory,
        }
        for arn, f in deployment.functions.items()
    }


def _run_runner(
    job: dict[str, Any], job_path: Path, result_path: Path, timeout_seconds: int
) -> dict[str, Any]:
    """Write the job, run twin/runner/run.mjs on it, read what it wrote."""
    job_path.write_text(json.dumps(job))
    proc = subprocess.run(
        ["node", str(RUNNER), str(job_path), str(result_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        env={**os.environ},
    )
    if proc.returncode != 0 or not result_path.exists():
        raise RuntimeError(
            f"the ASL runner failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    raw: dict[str, Any] = json.loads(result_path.read_text())
    return raw


def invoke_function(
    emu: Emulator, deployment: Deployment, function_arn: str, event: Any, name: str, logdir: Path
) -> ExecutionResult:
    """Invoke one function with an event, as EventBridge does for a Lambda target: through the
    runner's worker (the real handler, the function's environment), as a one-Task definition."""
    definition = {
        "StartAt": "Invoke",
        "States": {"Invoke": {"Type": "Task", "Resource": function_arn, "End": True}},
    }
    machine = Machine("", f"arn:aws:states:{deployment.region}:{deployment.account}:"
                      f"stateMachine:twin-invoke", "twin-invoke", definition)  # fmt: skip
    return execute(emu, deployment, event, name, logdir, machine=machine)
