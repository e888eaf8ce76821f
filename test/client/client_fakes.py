"""A fake Step Functions and SSM for the client's tests: an execution that goes through a scripted
list of (status, history events) steps, one per DescribeExecution."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:Workflow"
BATCH_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:Batch"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:Workflow:run-1"


def error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (fake)"}}, operation)


def entered(name: str, kind: str = "Pass") -> dict[str, Any]:
    return {
        "type": f"{kind}StateEntered",
        "stateEnteredEventDetails": {"name": name, "input": "{}"},
    }


def check_compaction(progress: dict[str, Any] | None) -> dict[str, Any]:
    output = json.dumps({"compaction": {"done": False, "progress": progress}})
    return {
        "type": "TaskStateExited",
        "stateExitedEventDetails": {"name": "Check compaction", "output": output},
    }


def progress(percent: float, done: int, total: int, eta: float | None) -> dict[str, Any]:
    return {
        "phase": "copy",
        "percent": percent,
        "bytesDone": done,
        "bytesTotal": total,
        "etaSeconds": eta,
        "at": "2026-11-23T01:00:00Z",
    }


@dataclass
class FakeSfn:
    """steps: each DescribeExecution moves one step on: (status, new events, answer fields)."""

    steps: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = field(default_factory=list)
    started: list[dict[str, Any]] = field(default_factory=list)
    throttle_next: int = 0
    page_size: int = 2
    history_calls: int = 0
    map_counts: dict[str, int] | None = None
    _step: int = -1
    _events: list[dict[str, Any]] = field(default_factory=list)

    def start_execution(self, **kwargs: Any) -> dict[str, Any]:
        self.started.append(kwargs)
        return {"executionArn": EXECUTION, "startDate": "2026-11-23T01:00:00Z"}

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        if self.throttle_next:
            self.throttle_next -= 1
            raise error("ThrottlingException", "DescribeExecution")
        self._step = min(self._step + 1, len(self.steps) - 1)
        status, events, extra = self.steps[self._step]
        for event in events:
            self._events.append({**event, "id": len(self._events) + 1})
        return {"executionArn": executionArn, "status": status, **extra}

    def get_execution_history(self, **kwargs: Any) -> dict[str, Any]:
        self.history_calls += 1
        assert kwargs["reverseOrder"] is True
        ordered = list(reversed(self._events))
        start = int(kwargs.get("nextToken", "0"))
        page = ordered[start : start + self.page_size]
        answer: dict[str, Any] = {"events": page}
        if start + self.page_size < len(ordered):
            answer["nextToken"] = str(start + self.page_size)
        return answer

    def describe_map_run(self, mapRunArn: str) -> dict[str, Any]:
        if self.map_counts is None:
            raise error("ResourceNotFound", "DescribeMapRun")
        return {"mapRunArn": mapRunArn, "itemCounts": self.map_counts}


@dataclass
class FakeSsm:
    parameters: dict[str, str] = field(default_factory=dict)

    def get_parameter(self, Name: str) -> dict[str, Any]:
        if Name not in self.parameters:
            raise error("ParameterNotFound", "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.parameters[Name]}}


ATTEMPT_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:Attempt"


def attempt_arn(n: int) -> str:
    return f"arn:aws:states:us-east-1:123456789012:execution:Attempt:run-1-attempt-{n}"


def submitted(attempt: str, resource_type: str = "states") -> dict[str, Any]:
    """`Run attempt`'s TaskSubmitted (startExecution.sync:2): the StartExecution response."""
    output = json.dumps({"ExecutionArn": attempt, "StartDate": 1795000000000})
    return {
        "type": "TaskSubmitted",
        "taskSubmittedEventDetails": {
            "resourceType": resource_type,
            "resource": "startExecution.sync:2",
            "output": output,
        },
    }


@dataclass
class FakeExecutions:
    """A workflow execution (EXECUTION) and its launch attempts, each with its own history.
    steps: each DescribeExecution of EXECUTION moves one step on: (status, {arn: new events}).
    unreadable: {arn: error codes} the next history reads of that arn raise, one a read."""

    steps: list[tuple[str, dict[str, list[dict[str, Any]]]]]
    unreadable: dict[str, list[str]] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)
    _step: int = -1
    _events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        assert executionArn == EXECUTION, "the client describes the workflow's execution only"
        self._step = min(self._step + 1, len(self.steps) - 1)
        status, new = self.steps[self._step]
        for arn, events in new.items():
            history = self._events.setdefault(arn, [])
            base = len(history)
            history.extend([{**e, "id": base + i + 1} for i, e in enumerate(events)])
        return {"executionArn": executionArn, "status": status}

    def get_execution_history(self, **kwargs: Any) -> dict[str, Any]:
        arn = kwargs["executionArn"]
        self.reads.append(arn)
        codes = self.unreadable.get(arn)
        if codes:
            raise error(codes.pop(0), "GetExecutionHistory")
        return {"events": list(reversed(self._events.get(arn, [])))}
