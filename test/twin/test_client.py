"""The client (`ebs-compactor`, client/) against the twin's Step Functions API
(twin/emulator/stepfunctions_twin.py): StartExecution runs the execution with the ASL runner in the
background, GetExecutionHistory answers from the runner's live event log.

The first tests use a small hand-written definition (Pass, Wait and Fail states; no disks, a few
seconds each); the last one compacts a real snapshot with the deployed stack and follows it with
`--wait`, then reads it back with `status` and `report`, and starts a bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twin.cfn import Deployment
from twin.context import setup
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator
from twin.emulator.stepfunctions_twin import Served, publish_stack_parameters, serve
from twin.execution import Machine
from twin.options import Options

CLIENT = Path(sys.executable).parent / "ebs-compactor"
PROGRESS = {"phase": "copy", "percent": 37.5, "bytesDone": 3 * 2**20, "bytesTotal": 8 * 2**20,
            "etaSeconds": 12, "at": "2026-11-23T01:00:00Z"}  # fmt: skip
REPORT = {"outcome": "success", "newSnapshotIds": ["snap-0123456789abcdef0"]}
BAD = "snap-000000000000bad00"
DEFINITION = {
    "StartAt": "Bad input?",
    "States": {
        "Bad input?": {"Type": "Choice", "Default": "Prepare phase", "Choices": [
            {"Variable": "$.snapshotId", "StringEquals": BAD, "Next": "Refuse"}]},
        "Refuse": {"Type": "Fail", "Error": "InvalidInput", "Cause": "snapshotId: not a snapshot"},
        "Prepare phase": {"Type": "Pass", "Next": "Long wait?"},
        "Long wait?": {"Type": "Choice", "Default": "Compaction phase", "Choices": [
            {"Variable": "$.wait", "IsPresent": True, "Next": "Wait long"}]},
        "Wait long": {"Type": "Wait", "Seconds": 3000, "Next": "Compaction phase"},
        "Compaction phase": {"Type": "Pass", "Next": "Check compaction"},
        "Check compaction": {"Type": "Pass", "Result": {"done": True, "progress": PROGRESS},
                             "ResultPath": "$.compaction", "Next": "Report phase"},
        "Report phase": {"Type": "Pass", "Result": REPORT, "ResultPath": "$.report",
                         "Next": "Done"},
        "Done": {"Type": "Succeed", "OutputPath": "$.report"},
    },
}  # fmt: skip


@pytest.fixture
def small_machine(emulator: Emulator, tmp_path: Path) -> Iterator[tuple[Emulator, str, Served]]:
    """The hand-written definition in moto's Step Functions, its executions run by the twin."""
    d = Deployment(stack_name="ClientTwin", region=emulator.region, account=emulator.account)
    arn = emulator.boto3_client("stepfunctions").create_state_machine(
        name="small", definition=json.dumps(DEFINITION),
        roleArn=f"arn:aws:iam::{d.account}:role/twin-state-machine",
    )["stateMachineArn"]  # fmt: skip
    with serve(emulator, d, {arn: Machine("", arn, "small", DEFINITION)}, tmp_path / "logs") as sv:
        yield emulator, arn, sv


def client(emu: Emulator, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **emu.client_env()}
    return subprocess.run([str(CLIENT), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


def test_wait_shows_phases_and_percent_and_exits_0(
    small_machine: tuple[Emulator, str, Served],
) -> None:
    emu, arn, served = small_machine
    served.throttle_history = 3  # boto3's retries (standard mode) take them: the wait goes on
    proc = client(emu, "start", "--state-machine-arn", arn, "--snapshot", "snap-0123456789abcdef0",
                  "--wait", "--poll-seconds", "0.2", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "phase: Prepare" in lines and "phase: Report" in lines, lines
    assert "copy: 37.5% 3.0 MiB of 8.0 MiB, about 12s left" in lines
    assert json.loads(proc.stdout) == REPORT
    assert lines[-1].startswith("SUCCEEDED outcome=success")
    assert served.throttle_history == 0


def _start(emu: Emulator, arn: str, document: dict[str, Any]) -> str:
    sfn = emu.boto3_client("stepfunctions")
    return str(sfn.start_execution(stateMachineArn=arn, input=json.dumps(document))["executionArn"])


def _wait_for(emu: Emulator, execution: str, status: str, seconds: float = 60) -> dict[str, Any]:
    sfn, deadline = emu.boto3_client("stepfunctions"), time.monotonic() + seconds
    while time.monotonic() < deadline:
        described: dict[str, Any] = sfn.describe_execution(executionArn=execution)
        if described["status"] == status:
            return described
        time.sleep(0.1)
    raise AssertionError(f"{execution} did not become {status}: {described}")


def test_a_failed_run_exits_1_with_the_error_name(
    small_machine: tuple[Emulator, str, Served],
) -> None:
    emu, arn, _ = small_machine
    proc = client(emu, "start", "--state-machine-arn", arn, "--snapshot", BAD, "--wait",
                  "--poll-seconds", "0.2")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    # without --json the start and the end go to stdout, progress lines to stderr
    last = proc.stdout.splitlines()[-1]
    assert last == "FAILED error=InvalidInput cause=snapshotId: not a snapshot"
    execution = proc.stdout.splitlines()[0].removeprefix("started: ")
    status = client(emu, "status", execution)
    assert status.returncode == 1 and status.stdout.splitlines()[-1] == last
    assert client(emu, "report", execution).returncode == 5  # no report state ran


def test_history_pages_like_aws_and_stop_aborts(
    small_machine: tuple[Emulator, str, Served],
) -> None:
    emu, arn, _ = small_machine
    sfn = emu.boto3_client("stepfunctions")
    execution = _start(emu, arn, {"snapshotId": "snap-1", "wait": True})  # 30 s in the twin
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = sfn.get_execution_history(executionArn=execution)["events"]
        if any(e["type"] == "WaitStateEntered" for e in events):
            break
        time.sleep(0.1)
    assert [e["type"] for e in events][:3] == [
        "ExecutionStarted", "ChoiceStateEntered", "ChoiceStateExited"]  # fmt: skip
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[1]["stateEnteredEventDetails"]["name"] == "Bad input?"
    assert json.loads(events[0]["executionStartedEventDetails"]["input"])["wait"] is True
    # newest first, two a page, nextToken to the end
    seen, kwargs = [], {"executionArn": execution, "reverseOrder": True, "maxResults": 2}
    while True:
        page = sfn.get_execution_history(**kwargs)
        assert len(page["events"]) <= 2
        seen += [e["id"] for e in page["events"]]
        if "nextToken" not in page:
            break
        kwargs["nextToken"] = page["nextToken"]
    assert seen == sorted(seen, reverse=True) and seen[-1] == 1
    assert sfn.describe_execution(executionArn=execution)["status"] == "RUNNING"
    sfn.stop_execution(executionArn=execution)
    described = _wait_for(emu, execution, "ABORTED", 30)
    assert "stopDate" in described
    proc = client(emu, "status", execution)
    assert proc.returncode == 4, proc.stdout
    types = [e["type"] for e in sfn.get_execution_history(executionArn=execution)["events"]]
    assert types[-1] == "ExecutionAborted"


def test_client_follows_a_real_compaction(cdk_out: Path, tmp_path: Path) -> None:
    """The deployed stack: the client finds the state machine through the stack's SSM parameter,
    starts a compaction, shows its phases and the copy's percent, exits 0 and --json prints the
    report; status and report read it back; a snapshot that does not exist fails with its error
    name and a non-zero exit; a batch through the client (_batch_through_the_client)."""
    opts = Options(cdk_out=cdk_out, out_dir=tmp_path / "out", diskless=True)  # the API, no bytes
    with Emulator(tmp_path / "emu", Faults(), diskless=True) as emu:
        ctx = setup(emu, opts, None, tmp_path / "work", tmp_path / "logs")
        assert any(n.endswith("/state-machine-arn") for n in publish_stack_parameters(
            emu, ctx.d, cdk_out))  # fmt: skip
        with serve(emu, ctx.d, ctx.machines, ctx.logdir, wait_ms=opts.wait_ms):
            stack = ["--stack", ctx.d.stack_name]
            proc = client(emu, *stack, "start", "--snapshot", ctx.registered.snapshot_ids[0],
                          "--wait", "--poll-seconds", "0.5", "--json")  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
            lines = proc.stderr.splitlines()
            # the attempt's phases: read from its own history, not the workflow's
            assert "phase: Prepare" in lines and "phase: Compaction" in lines, lines
            # e.g. "copy (volume 1/1): 100.0% 29.0 MiB of 29.0 MiB, about 0s left"; target
            # snapshot's copy is over within a poll here, its read-back ("verify ...") is seen
            progress = re.compile(r"(copy|verify)[^:]*: \d+\.\d% .+ of .+")
            assert any(progress.match(line) for line in lines), "\n".join(lines)
            report = json.loads(proc.stdout)
            assert report["outcome"] == "success"
            execution = lines[0].removeprefix("started: ")
            _attempt_is_its_own_execution(emu, execution)
            status = client(emu, *stack, "status", execution)
            assert status.returncode == 0 and "SUCCEEDED outcome=success" in status.stdout
            again = client(emu, *stack, "report", execution)
            assert again.returncode == 0 and json.loads(again.stdout) == report
            bad = client(emu, *stack, "start", "--snapshot", "snap-0000000000000dead", "--wait",
                         "--poll-seconds", "0.5")  # fmt: skip
            assert bad.returncode == 1, bad.stderr[-3000:]
            assert bad.stdout.splitlines()[-1].startswith("FAILED error=SnapshotNotFound"), bad
            _batch_through_the_client(emu, stack, ctx.registered.snapshot_ids[0])


def _attempt_is_its_own_execution(emu: Emulator, execution: str) -> None:
    """As in AWS: the workflow's history has only `Run attempt`'s Task events; the attempt (the
    TaskSubmitted's ExecutionArn) has its own record, history and place in ListExecutions."""
    sfn = emu.boto3_client("stepfunctions")
    events = sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
    names = {e.get("stateEnteredEventDetails", {}).get("name") for e in events}
    assert "Run attempt" in names and "Check compaction" not in names, names
    start = next(i for i, e in enumerate(events)
                 if e.get("stateEnteredEventDetails", {}).get("name") == "Run attempt")  # fmt: skip
    assert [e["type"] for e in events[start : start + 6]] == [
        "TaskStateEntered", "TaskScheduled", "TaskStarted", "TaskSubmitted", "TaskSucceeded",
        "TaskStateExited"]  # fmt: skip
    submitted = events[start + 3]["taskSubmittedEventDetails"]
    assert (submitted["resourceType"], submitted["resource"]) == ("states", "startExecution.sync:2")
    attempt = json.loads(submitted["output"])["ExecutionArn"]
    described = sfn.describe_execution(executionArn=attempt)
    assert described["status"] == "SUCCEEDED", described
    listed = sfn.list_executions(stateMachineArn=described["stateMachineArn"])["executions"]
    assert attempt in [e["executionArn"] for e in listed]
    own = sfn.get_execution_history(executionArn=attempt, maxResults=1000)["events"]
    assert (own[0]["type"], own[-1]["type"]) == ("ExecutionStarted", "ExecutionSucceeded")
    exited = [e["stateExitedEventDetails"]["name"] for e in own if "stateExitedEventDetails" in e]
    assert "Check compaction" in exited and "Run attempt" not in exited, exited


def _batch_through_the_client(emu: Emulator, stack: list[str], snapshot: str) -> None:
    """`batch` starts the stack's batch workflow (its own SSM parameter) with a good snapshot
    and a missing one: the missing one fails alone, the batch SUCCEEDS with outcome partial
    (exit 6: a pipeline notices), --json prints the summary naming the failed item."""
    missing = "snap-0badc0ffee0000000"
    items = ["--snapshot", snapshot, "--snapshot", missing, "--max-concurrency", "2"]
    proc = client(emu, *stack, "batch", *items, "--wait", "--poll-seconds", "0.5", "--json")
    assert proc.returncode == 6, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert "step: Resolve batch" in lines and "step: Summarize batch" in lines, lines
    # item counts from DescribeMapRun (the twin's MapRunStarted event names the run)
    assert "items: 2 total, 1 succeeded, 1 failed" in lines, lines
    summary = json.loads(proc.stdout)
    assert summary["outcome"] == "partial", summary
    assert (summary["totals"]["succeeded"], summary["totals"]["failed"]) == (1, 1), summary
    assert [item["id"] for item in summary["failedItems"]] == [missing], summary
    assert lines[-1].startswith("SUCCEEDED outcome=partial items=2"), lines


CHILD = {
    "StartAt": "Child phase",
    "States": {
        "Child phase": {"Type": "Pass", "Next": "Boom"},
        "Boom": {"Type": "Fail", "Error": "Boom", "Cause": "the child failed"},
    },
}


def test_a_failed_child_is_its_own_execution_and_fails_the_task(
    emulator: Emulator, tmp_path: Path
) -> None:
    """A startExecution.sync:2 Task whose child fails, as AWS shows it: the parent's history has
    the Task's events ending in TaskFailed (States.TaskFailed), the child its own states and its
    own end; the child's first history read answers ExecutionDoesNotExist; --wait follows it."""
    d = Deployment(stack_name="ClientTwin", region=emulator.region, account=emulator.account)
    sfn, role = emulator.boto3_client("stepfunctions"), f"arn:aws:iam::{d.account}:role/twin-sm"
    child = sfn.create_state_machine(name="child", definition=json.dumps(CHILD), roleArn=role)
    task = {"Type": "Task", "Resource": "arn:aws:states:::states:startExecution.sync:2",
            "Parameters": {"StateMachineArn": child["stateMachineArn"], "Input": {}},
            "End": True}  # fmt: skip
    parent = {"StartAt": "Run child", "States": {"Run child": task}}
    arn = sfn.create_state_machine(name="parent", definition=json.dumps(parent), roleArn=role)[
        "stateMachineArn"
    ]
    child_arn = child["stateMachineArn"]
    machines = {arn: Machine("", arn, "parent", parent),
                child_arn: Machine("", child_arn, "child", CHILD)}  # fmt: skip
    with serve(emulator, d, machines, tmp_path / "logs"):
        proc = client(emulator, "start", "--state-machine-arn", arn, "--snapshot",
                      "snap-0123456789abcdef0", "--wait", "--poll-seconds", "0.2")  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        assert "phase: Child" in proc.stderr.splitlines(), proc.stderr
        execution = proc.stdout.splitlines()[0].removeprefix("started: ")
        events = sfn.get_execution_history(executionArn=execution)["events"]
        assert [e["type"] for e in events] == [
            "ExecutionStarted", "TaskStateEntered", "TaskScheduled", "TaskStarted",
            "TaskSubmitted", "TaskFailed", "ExecutionFailed"]  # fmt: skip
        failed = events[5]["taskFailedEventDetails"]
        assert (failed["resourceType"], failed["error"]) == ("states", "States.TaskFailed")
        started = json.loads(events[4]["taskSubmittedEventDetails"]["output"])["ExecutionArn"]
        assert json.loads(failed["cause"])["Error"] == "Boom"
        described = sfn.describe_execution(executionArn=started)
        assert (described["status"], described["error"]) == ("FAILED", "Boom")
        own = [e["type"] for e in sfn.get_execution_history(executionArn=started)["events"]]
        assert own[0] == "ExecutionStarted" and own[-1] == "ExecutionFailed", own
        # the next run's child, read by no client yet: its first history read is refused
        second = _wait_for(emulator, _start(emulator, arn, {}), "FAILED")["executionArn"]
        events = sfn.get_execution_history(executionArn=second)["events"]
        fresh = json.loads(events[4]["taskSubmittedEventDetails"]["output"])["ExecutionArn"]
        with pytest.raises(sfn.exceptions.ExecutionDoesNotExist):
            sfn.get_execution_history(executionArn=fresh)
        assert sfn.get_execution_history(executionArn=fresh)["events"][-1]["type"] == (
            "ExecutionFailed"
        )
