"""The Step Functions API a client uses (StartExecution, DescribeExecution, GetExecutionHistory,
StopExecution), answered by the twin for the deployed state machines.

Opt-in: `serve(emu, deployment, machines, logdir)` (a context manager) makes moto's StartExecution
of one of those machines RUN the execution: a background thread runs it with the ASL interpreter
(twin.execution.execute), whose runner appends each event to a live JSON-lines log as it happens.
DescribeExecution answers from moto's execution record, which the thread updates at the end
(status, output, error, cause, stopDate); GetExecutionHistory answers from the live log in AWS's
event shapes (ids, previousEventId, timestamps, `<Type>StateEntered`/`Exited` with their details,
ExecutionSucceeded/Failed/Aborted/TimedOut), paginated with maxResults/nextToken and reverseOrder;
StopExecution asks the runner to abort (its stop file) and the execution ends ABORTED once the
Lambda call in flight has completed, as in AWS. Without serve() the twin is unchanged: a start
lands in moto and the scenario runs it (twin/starts.py).

A child execution the runner runs in its own process (a launch attempt, `Run attempt`'s
startExecution.sync:2) is an execution of its own, as in AWS: the runner announces it
(`/_twin/child-execution`, child_execution()) and it gets moto's record of the attempt state
machine (DescribeExecution, ListExecutions) and its own live log (GetExecutionHistory). The
parent's history has only the Task's events (TaskScheduled, TaskStarted, TaskSubmitted with the
StartExecution response, TaskSucceeded/TaskFailed). Harsh as AWS's eventual consistency: the
first CHILD_UNREADABLE_READS GetExecutionHistory calls of a child answer ExecutionDoesNotExist.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto.core.exceptions import AWSError
from moto.core.utils import utcnow
from moto.stepfunctions.models import StepFunctionBackend
from moto.stepfunctions.responses import StepFunctionResponse

from . import patching
from . import state as st

if TYPE_CHECKING:
    from ..cfn import Deployment
    from ..execution import Machine
    from .server import Emulator

CHILD_UNREADABLE_READS = 1
MAX_RESULTS = 1000  # GetExecutionHistory's maxResults: 1..1000, default 100
DEFAULT_RESULTS = 100
END_TYPES = {
    "ExecutionSucceeded": "executionSucceededEventDetails",
    "ExecutionFailed": "executionFailedEventDetails",
    "ExecutionAborted": "executionAbortedEventDetails",
    "ExecutionTimeout": "executionTimedOutEventDetails",
}


@dataclass
class Run:
    """One execution the twin runs: its live log, stop file and thread."""

    arn: str
    log: Path
    stop_file: Path
    thread: threading.Thread | None = None
    # GetExecutionHistory calls still answered ExecutionDoesNotExist (a child just started)
    unreadable_reads: int = 0


@dataclass
class Served:
    emu: Emulator
    deployment: Deployment
    machines: dict[str, Machine]
    logdir: Path
    execute_options: dict[str, Any]
    runs: dict[str, Run] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the next this many GetExecutionHistory calls are throttled (ThrottlingException, as AWS
    # answers past its token bucket), to show a client backs off and goes on
    throttle_history: int = 0


_SERVED: Served | None = None
_ORIGINALS: dict[str, Any] = {}


@contextmanager
def serve(
    emu: Emulator,
    deployment: Deployment,
    machines: dict[str, Machine],
    logdir: Path,
    **execute_options: Any,
) -> Iterator[Served]:
    """Run the executions StartExecution starts of `machines` (by ARN) until the block ends; on
    exit, executions still running are stopped and waited for."""
    global _SERVED
    if _SERVED is not None:
        raise RuntimeError("the twin already serves Step Functions executions in this process")
    patching.install(_ORIGINALS, _PATCHES)
    served = Served(emu, deployment, machines, logdir, execute_options)
    _SERVED = served
    try:
        yield served
    finally:
        _SERVED = None
        for run in list(served.runs.values()):
            run.stop_file.touch()
        for run in list(served.runs.values()):
            if run.thread is not None:
                run.thread.join(timeout=600)


def publish_stack_parameters(emu: Emulator, deployment: Deployment, cdk_out: Path) -> list[str]:
    """The stack's AWS::SSM::Parameter resources (e.g. /ebs-snapshot-compactor/<stack>/
    state-machine-arn, which the client reads), put into the emulator's SSM; their names."""
    from ..cfn import Resolver, load_template, resources_of

    _, template = load_template(cdk_out)
    r = Resolver(template, deployment, params=Resolver.parameter_values(template))
    ssm, names = emu.boto3_client("ssm"), []
    for res in resources_of(template, "AWS::SSM::Parameter").values():
        props = r.resolve(res["Properties"])
        ssm.put_parameter(Name=props["Name"], Value=str(props["Value"]),
                          Type=props.get("Type", "String"), Overwrite=True)  # fmt: skip
        names.append(str(props["Name"]))
    return names


def _served_run(execution_arn: str) -> tuple[Served, Run] | None:
    served = _SERVED
    if served is None:
        return None
    with served.lock:
        run = served.runs.get(execution_arn)
    return (served, run) if run is not None else None


# --- StartExecution / StopExecution (moto's backend) ------------------------------------------


def _start_execution(self: Any, state_machine_arn: str, name: str, execution_input: str) -> Any:
    execution = _ORIGINALS["start"](self, state_machine_arn, name, execution_input)
    served = _SERVED
    if served is None or state_machine_arn not in served.machines:
        return execution
    with served.lock:
        if execution.execution_arn in served.runs:  # an idempotent repeat of a running start
            return execution
        served.logdir.mkdir(parents=True, exist_ok=True)
        log = served.logdir / f"{execution.name}.events.jsonl"
        log.write_text("")
        run = Run(execution.execution_arn, log, log.with_suffix(".stop"))
        served.runs[run.arn] = run
    run.thread = threading.Thread(
        target=_run, args=(served, run, execution, state_machine_arn), daemon=True,
        name=f"sfn-twin-{execution.name}",
    )  # fmt: skip
    run.thread.start()
    return execution


def _run(served: Served, run: Run, execution: Any, state_machine_arn: str) -> None:
    """The execution to its end with the runner; moto's record takes its status and output."""
    from ..execution import execute

    try:
        result = execute(
            served.emu, served.deployment, json.loads(execution.execution_input or "{}"),
            execution.name, served.logdir, machine=served.machines[state_machine_arn],
            live_log=run.log,
            machines=served.machines, **served.execute_options,
        )  # fmt: skip
        status, output = result.status, result.output
        error, cause = result.error, result.cause
    except Exception as exc:  # the runner itself failed: the execution fails, saying why
        status, output, error, cause = "FAILED", None, "States.Runtime", str(exc)[-4000:]
    execution.status = status
    execution.output = json.dumps(output) if status == "SUCCEEDED" else None
    execution.error = error
    execution.cause = cause if isinstance(cause, str) or cause is None else json.dumps(cause)
    execution.stop_date = utcnow()


def child_execution(account: str, region: str, request: dict[str, Any]) -> bool:
    """A child the runner runs in its process started (status RUNNING) or ended: moto's record of
    it (created at the start, its end written at the end) and its live log; False when the twin
    serves no Step Functions API (a scenario run without serve())."""
    from moto.stepfunctions.models import stepfunctions_backends

    served = _SERVED
    if served is None:
        return False
    backend = stepfunctions_backends[account][region]
    arn = str(request["executionArn"])
    if request["status"] == "RUNNING":
        execution = _ORIGINALS["start"](backend, request["stateMachineArn"], request["name"],
                                        json.dumps(request.get("input") or {}))  # fmt: skip
        if execution.execution_arn != arn:
            raise ValueError(f"the runner's child {arn} is {execution.execution_arn} in moto")
        log = Path(request["log"])
        with served.lock:
            served.runs[arn] = Run(arn, log, log.with_suffix(".stop"),
                                   unreadable_reads=CHILD_UNREADABLE_READS)  # fmt: skip
        return True
    execution = backend.describe_execution(arn)
    execution.status = request["status"]
    output = request.get("output")
    execution.output = json.dumps(output) if request["status"] == "SUCCEEDED" else None
    execution.error = request.get("error")
    execution.cause = _cause(request)
    execution.stop_date = utcnow()
    return True


def _stop_execution(self: Any, execution_arn: str) -> Any:
    found = _served_run(execution_arn)
    if found is None:
        return _ORIGINALS["stop"](self, execution_arn)
    _, run = found
    execution = self.describe_execution(execution_arn)
    if execution.status == "RUNNING":
        run.stop_file.touch()  # the runner aborts; _run records ABORTED when it has
    return _StopAnswer(utcnow())


@dataclass
class _StopAnswer:
    stop_date: datetime.datetime


# --- GetExecutionHistory (moto's responses: it ignores paging and order) ------------------------


def _get_execution_history(self: Any) -> Any:
    arn = self._get_param("executionArn")
    found = _served_run(arn)
    if found is None:
        return _ORIGINALS["history"](self)
    from moto.core.responses import ActionResult

    served, run = found
    with served.lock:
        throttled = served.throttle_history > 0
        served.throttle_history = max(0, served.throttle_history - 1)
    if throttled:
        raise Throttling()
    with served.lock:
        unreadable = run.unreadable_reads > 0
        run.unreadable_reads = max(0, run.unreadable_reads - 1)
    if unreadable:
        from moto.stepfunctions.exceptions import ExecutionDoesNotExist

        raise ExecutionDoesNotExist(f"Execution Does Not Exist: '{arn}'")  # type: ignore[no-untyped-call]
    role = f"arn:aws:iam::{served.deployment.account}:role/twin-state-machine"
    events = history_events(read_log(run.log), role, self._get_param("includeExecutionData", True))
    events = with_map_runs(events, _map_runs_of(arn))
    page, token = paginate(
        events,
        max_results=self._get_int_param("maxResults") or DEFAULT_RESULTS,
        reverse=bool(self._get_param("reverseOrder", False)),
        next_token=self._get_param("nextToken"),
    )
    answer: dict[str, Any] = {"events": page}
    if token is not None:
        answer["nextToken"] = token
    return ActionResult(answer)


class Throttling(AWSError):
    TYPE = "ThrottlingException"
    STATUS = 400

    def __init__(self) -> None:
        super().__init__("Rate exceeded")


def read_log(path: Path) -> list[dict[str, Any]]:
    """The live log's complete lines (the last may be half written while the runner goes on)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


def paginate(
    events: list[dict[str, Any]], max_results: int, reverse: bool, next_token: str | None
) -> tuple[list[dict[str, Any]], str | None]:  # fmt: skip
    """One page. The token names the event id to go on from, so that a reverse walk started
    while the run goes on keeps its place (new events come after the newest it saw)."""
    if not 1 <= max_results <= MAX_RESULTS:
        from moto.stepfunctions.exceptions import InvalidToken

        raise InvalidToken(f"maxResults must be between 1 and {MAX_RESULTS}")  # type: ignore[no-untyped-call]
    ordered = list(reversed(events)) if reverse else events
    start = 0
    if next_token:
        try:
            after = int(json.loads(base64.b64decode(next_token))["after"])
        except (ValueError, KeyError, TypeError) as exc:
            from moto.stepfunctions.exceptions import InvalidToken

            raise InvalidToken("Invalid token") from exc  # type: ignore[no-untyped-call]
        start = next((i for i, e in enumerate(ordered) if e["id"] == after), len(ordered)) + 1
    page = ordered[start : start + max_results]
    more = start + max_results < len(ordered)
    token = base64.b64encode(json.dumps({"after": page[-1]["id"]}).encode()).decode() if (
        more and page) else None  # fmt: skip
    return page, token


def history_events(
    lines: list[dict[str, Any]], role_arn: str, include_data: bool = True
) -> list[dict[str, Any]]:
    """The runner's events in AWS's GetExecutionHistory shapes (ids from 1, in order)."""
    out: list[dict[str, Any]] = []
    for line in lines:
        event = _aws_event(line, role_arn, include_data)
        if event is not None:
            event["id"], event["previousEventId"] = len(out) + 1, len(out)
            out.append(event)
    return out


def _aws_event(line: dict[str, Any], role_arn: str, include: bool) -> dict[str, Any] | None:
    kind = line["type"]
    event: dict[str, Any] = {"timestamp": _at(line["timestamp"])}
    data = (lambda v: json.dumps(v)) if include else (lambda v: None)
    if kind == "ExecutionStarted":
        details = {"input": data(line["input"]), "inputDetails": {"truncated": False},
                   "roleArn": role_arn}  # fmt: skip
        event.update(type=kind, executionStartedEventDetails=_clean(details))
    elif kind in END_TYPES:
        details = (
            {"output": data(line["output"]), "outputDetails": {"truncated": False}}
            if (kind == "ExecutionSucceeded")
            else {"error": line["error"], "cause": _cause(line)}
        )
        aws_type = "ExecutionTimedOut" if kind == "ExecutionTimeout" else kind
        event.update({"type": aws_type, END_TYPES[kind]: _clean(details)})
    elif kind in ("StateEntered", "StateExited"):
        event.update(_state_event(line, data))
    elif kind in TASK_TYPES:
        event.update(_task_event(line, data))
    elif kind == "StateFailed" and line.get("stateType") == "Task":
        details = {"resourceType": "lambda", "resource": "invoke", "error": line["error"],
                   "cause": _cause(line)}  # fmt: skip
        event.update(type="TaskFailed", taskFailedEventDetails=_clean(details))
    else:  # retries, catches, Map iterations: not what a client follows here
        return None
    return event


def _state_event(line: dict[str, Any], data: Any) -> dict[str, Any]:
    """`<StateType>StateEntered` {name, input} or `<StateType>StateExited` {name, output}."""
    if line["type"] == "StateEntered":
        details = {"name": line["state"], "input": data(line["input"]),
                   "inputDetails": {"truncated": False}}  # fmt: skip
        return {"type": f"{line['stateType']}StateEntered",
                "stateEnteredEventDetails": _clean(details)}  # fmt: skip
    details = {"name": line["state"], "output": data(line["output"]),
               "outputDetails": {"truncated": False}}  # fmt: skip
    return {"type": f"{line['stateType']}StateExited", "stateExitedEventDetails": _clean(details)}


TASK_TYPES = {
    "TaskScheduled": "taskScheduledEventDetails",
    "TaskStarted": "taskStartedEventDetails",
    "TaskSubmitted": "taskSubmittedEventDetails",
    "TaskSucceeded": "taskSucceededEventDetails",
    "TaskFailed": "taskFailedEventDetails",
}


def _task_event(line: dict[str, Any], data: Any) -> dict[str, Any]:
    """A Task's own event as the runner logged it (a StartExecution Task: resourceType "states",
    resource e.g. "startExecution.sync:2")."""
    kind, arn = line["type"], str(line.get("resource") or "")
    service, _, resource = arn.removeprefix("arn:aws:states:::").partition(":")
    details: dict[str, Any] = {"resourceType": service, "resource": resource}
    if kind == "TaskScheduled":
        details["parameters"] = data(line["input"])
    elif kind in ("TaskSubmitted", "TaskSucceeded"):
        details.update(output=data(line["output"]), outputDetails={"truncated": False})
    elif kind == "TaskFailed":
        details.update(error=line["error"], cause=_cause(line))
    return {"type": kind, TASK_TYPES[kind]: _clean(details)}


def _map_runs_of(execution_arn: str) -> list[dict[str, Any]]:
    """The Distributed Map runs the runner announced for this execution (emulator/map_runs.py)."""
    emu = st.ACTIVE
    if emu is None:
        return []
    with emu.lock:
        runs = [dict(r) for r in emu.map_runs.values()]
    return [r for r in runs if r.get("executionArn") == execution_arn]


def with_map_runs(events: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with AWS's MapRunStarted (details: mapRunArn) as each Map Run started and
    MapRunSucceeded/MapRunFailed as it ended, in time order, ids renumbered."""
    extra: list[dict[str, Any]] = []
    for run in runs:
        extra.append({"timestamp": _at(run["startedAt"]), "type": "MapRunStarted",
                      "mapRunStartedEventDetails": {"mapRunArn": run["mapRunArn"]}})  # fmt: skip
        if run.get("stoppedAt") and run.get("status") in ("SUCCEEDED", "FAILED"):
            end: dict[str, Any] = {"timestamp": _at(run["stoppedAt"]),
                                   "type": f"MapRun{run['status'].title()}"}  # fmt: skip
            if run["status"] == "FAILED":
                end["mapRunFailedEventDetails"] = _clean(
                    {"error": run.get("error"), "cause": run.get("cause")})  # fmt: skip
            extra.append(end)
    if not extra:
        return events
    merged = sorted(events + extra, key=lambda e: e["timestamp"])  # stable: ties keep order
    for i, event in enumerate(merged):
        event["id"], event["previousEventId"] = i + 1, i
    return merged


def _at(ms: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _cause(line: dict[str, Any]) -> str | None:
    cause = line.get("cause")
    return cause if isinstance(cause, str) or cause is None else json.dumps(cause)


def _clean(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if v is not None}


_PATCHES: dict[str, patching.Patch] = {
    "start": (StepFunctionBackend, "start_execution", _start_execution),
    "stop": (StepFunctionBackend, "stop_execution", _stop_execution),
    "history": (StepFunctionResponse, "get_execution_history", _get_execution_history),
}
