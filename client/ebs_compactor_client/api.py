"""The AWS calls of the client: find the state machine, start, describe, read the history, wait.

Throttling: boto3's standard retry mode retries throttled calls with backoff (up to
MAX_ATTEMPTS); a poll that still gets a throttling error backs off further (doubling its interval
up to MAX_INTERVAL) instead of failing the wait.

A launch attempt's history (progress.py: the attempt is a child execution) may not be readable at
once: Step Functions is eventually consistent, and a just-started execution can answer
ExecutionDoesNotExist (or AccessDeniedException) for a moment. Such a read is tried again at the
next poll; after UNREADABLE_POLLS of them in a row the wait says once that the attempt's progress
cannot be shown, and goes on."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from .progress import Progress, summary_line

PARAMETER_PREFIX = "/ebs-snapshot-compactor"
PARAMETERS = {"main": "state-machine-arn", "batch": "batch-state-machine-arn"}
MAX_ATTEMPTS = 8
MAX_INTERVAL = 60.0
THROTTLING = {
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
}
END_STATUSES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
NOT_YET_READABLE = ("ExecutionDoesNotExist", "AccessDeniedException")
UNREADABLE_POLLS = 5


class ClientFailure(RuntimeError):
    """An AWS call the client needs failed (not the execution): the message says which; `code`
    is AWS's error code, if there was one."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def session_config() -> Config:
    return Config(retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS})


@dataclass
class Api:
    sfn: Any
    ssm: Any

    @classmethod
    def create(cls, region: str | None = None, profile: str | None = None) -> Api:
        session = boto3.Session(region_name=region, profile_name=profile)
        config = session_config()
        return cls(
            session.client("stepfunctions", config=config), session.client("ssm", config=config)
        )

    def state_machine_arn(self, stack: str | None, given: str | None, kind: str) -> str:
        """--state-machine-arn, else the stack's SSM parameter of that kind (main or batch)."""
        if given:
            return given
        if not stack:
            raise ClientFailure(
                "say which stack: --stack NAME (or EBS_COMPACTOR_STACK) or --state-machine-arn"
            )
        name = f"{PARAMETER_PREFIX}/{stack}/{PARAMETERS[kind]}"
        try:
            value: str = self.ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            hint = (
                " (is the stack deployed, in this Region?)" if code == "ParameterNotFound" else ""
            )
            raise ClientFailure(f"SSM parameter {name}: {code}{hint}: {error}") from error
        return value

    def start(self, arn: str, document: dict[str, Any], name: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"stateMachineArn": arn, "input": json.dumps(document)}
        if name:
            kwargs["name"] = name
        answer: dict[str, Any] = self._call("start_execution", **kwargs)
        return answer

    def describe(self, execution_arn: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("describe_execution", executionArn=execution_arn)
        return answer

    def new_events(self, execution_arn: str, after_id: int) -> list[dict[str, Any]]:
        """History events with an id above after_id, oldest first: pages newest first
        (reverseOrder) until an old event is reached, so each poll reads what is new only."""
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "executionArn": execution_arn,
            "reverseOrder": True,
            "maxResults": 100,
        }
        while True:
            page = self._call("get_execution_history", **kwargs)
            for event in page.get("events", []):
                if int(event["id"]) <= after_id:
                    return list(reversed(found))
                found.append(event)
            token = page.get("nextToken")
            if not token:
                return list(reversed(found))
            kwargs["nextToken"] = token

    def all_events(self, execution_arn: str) -> list[dict[str, Any]]:
        return self.new_events(execution_arn, 0)

    def map_run_counts(self, map_run_arn: str) -> dict[str, int] | None:
        try:
            answer = self._call("describe_map_run", mapRunArn=map_run_arn)
        except ClientFailure:
            return None
        counts: dict[str, int] = answer.get("itemCounts", {})
        return counts

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.sfn, operation)(**kwargs)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in THROTTLING:
                raise Throttled(str(error), code) from error
            raise ClientFailure(f"states:{_action(operation)}: {error}", code) from error

    def attempt_lines(self, progress: Progress, attempt: str) -> list[str]:
        """The lines of the launch attempt's new history events; raises ClientFailure (its
        `code` in NOT_YET_READABLE while the attempt is not readable yet)."""
        events = self.new_events(attempt, progress.attempt_event_ids.get(attempt, 0))
        return progress.apply(events, attempt=attempt)


class Throttled(ClientFailure):
    """Still throttled after boto3's retries."""


def _action(operation: str) -> str:
    return "".join(part.title() for part in operation.split("_"))


@dataclass
class Waiter:
    """Polls one execution until it ends, printing progress lines to `out`."""

    api: Api
    execution_arn: str
    interval: float = 5.0
    batch: bool = False
    timeout: float | None = None
    out: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    sleep: Callable[[float], None] = lambda seconds: time.sleep(seconds)
    clock: Callable[[], float] = lambda: time.monotonic()

    def wait(self) -> dict[str, Any]:
        """The final DescribeExecution answer; raises TimeoutError when --timeout passes."""
        progress, interval = Progress(steps=self.batch), self.interval
        deadline = None if self.timeout is None else self.clock() + self.timeout
        unreadable: dict[str, int] = {}
        while True:
            try:
                described = self.api.describe(self.execution_arn)
                before = progress.attempt_arn
                self._show(
                    progress, self.api.new_events(self.execution_arn, progress.last_event_id)
                )
                if before and before != progress.attempt_arn:  # a relaunch: the old one's end
                    self._follow(progress, before, unreadable)
                if progress.attempt_arn:
                    self._follow(progress, progress.attempt_arn, unreadable)
                if progress.map_run_arn:
                    counts = self.api.map_run_counts(progress.map_run_arn)
                    self._show_line(progress.counts_line(counts) if counts else None)
                interval = self.interval
            except Throttled:
                interval = min(interval * 2, MAX_INTERVAL)
                self.out(f"throttled; polling every {interval:.0f} s")
                self.sleep(interval)
                continue
            if described["status"] in END_STATUSES:
                return described
            if deadline is not None and self.clock() >= deadline:
                raise TimeoutError(summary_line("RUNNING", None, None, None))
            self.sleep(interval)

    def _follow(self, progress: Progress, attempt: str, unreadable: dict[str, int]) -> None:
        """Show the attempt's new lines; one not readable yet is read again at the next poll."""
        try:
            lines = self.api.attempt_lines(progress, attempt)
        except ClientFailure as failure:
            if failure.code not in NOT_YET_READABLE:
                raise
            unreadable[attempt] = unreadable.get(attempt, 0) + 1
            if unreadable[attempt] == UNREADABLE_POLLS:
                self.out(
                    f"the launch attempt's history is not readable ({failure.code}), so its "
                    f"phases and copy progress are not shown; does your policy allow "
                    f"states:GetExecutionHistory on {attempt}?"
                )
            return
        unreadable.pop(attempt, None)
        for line in lines:
            self._show_line(line)

    def _show(self, progress: Progress, events: list[dict[str, Any]]) -> None:
        for line in progress.apply(events):
            self._show_line(line)

    def _show_line(self, line: str | None) -> None:
        if line:
            self.out(line)


def output_of(described: dict[str, Any]) -> Any:
    text = described.get("output")
    return json.loads(text) if text else None
