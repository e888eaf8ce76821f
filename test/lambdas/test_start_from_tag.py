"""start_from_tag against moto's Step Functions: one execution per snapshot and tag value."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from compactor import aws, errors, trigger
from compactor.handlers import start_from_tag
from conftest import REGION, TRIGGER_TAG
from moto import mock_aws
from support import FakeLambdaContext, capture, error_response, respond

SNAPSHOT = "snap-0123456789abcdef0"
ACCOUNT = "123456789012"
DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})


@pytest.fixture
def state_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The main state machine in moto, and only the two variables start_from_tag needs."""
    with mock_aws():
        aws.reset_clients()
        arn = aws.sfn().create_state_machine(
            name="compactor-test-Workflow",
            definition=DEFINITION,
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/compactor-test-workflow",
        )["stateMachineArn"]
        monkeypatch.setenv("STATE_MACHINE_ARN", arn)
        monkeypatch.setenv("TRIGGER_TAG_KEY", TRIGGER_TAG)
        yield str(arn)


def tag_event(
    value: str | None = "yes", resource: str = f"arn:aws:ec2:{REGION}::snapshot/{SNAPSHOT}"
) -> dict[str, Any]:
    """EC2's "Tag Change on Resource" event as EventBridge delivers it."""
    tags = {"team": "db"} | ({TRIGGER_TAG: value} if value is not None else {})
    return {
        "version": "0",
        "id": "7f2b3c4d-0000-4000-8000-000000000001",
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": ACCOUNT,
        "time": "2026-11-21T10:00:00Z",
        "region": REGION,
        "resources": [resource],
        "detail": {
            "changed-tag-keys": [TRIGGER_TAG],
            "service": "ec2",
            "resource-type": "snapshot",
            "version": 2,
            "tags": tags,
        },
    }


def start(event: dict[str, Any]) -> dict[str, Any]:
    return start_from_tag.handler(event, FakeLambdaContext())


def executions(arn: str) -> list[dict[str, Any]]:
    return list(aws.sfn().list_executions(stateMachineArn=arn)["executions"])


def test_starts_an_execution_named_after_the_snapshot_and_the_tag_value(
    state_machine: str,
) -> None:
    result = start(tag_event("yes"))
    name = f"tag-{SNAPSHOT}-{hashlib.sha256(b'yes').hexdigest()[:12]}"
    assert result == {
        "started": True,
        "executionArn": result["executionArn"],
        "executionName": name,
        "snapshotId": SNAPSHOT,
    }
    (execution,) = executions(state_machine)
    assert (execution["name"], execution["executionArn"]) == (name, result["executionArn"])
    assert result["executionArn"] == trigger.execution_arn(state_machine, name)
    described = aws.sfn().describe_execution(executionArn=result["executionArn"])
    assert json.loads(described["input"]) == {"snapshotId": SNAPSHOT}
    assert len(name) <= 80


def test_a_duplicate_event_is_a_no_op_that_says_so(state_machine: str) -> None:
    first = start(tag_event("yes"))
    starts = capture(aws.sfn(), "StartExecution")
    again = start(tag_event("yes"))
    assert again["started"] is False
    assert again["executionArn"] == first["executionArn"]
    assert "already exists" in again["reason"] and "new value" in again["reason"]
    assert starts == []  # found by DescribeExecution, no second StartExecution
    assert len(executions(state_machine)) == 1


def test_a_closed_execution_of_the_same_value_is_a_no_op(state_machine: str) -> None:
    first = start(tag_event("yes"))
    aws.sfn().stop_execution(executionArn=first["executionArn"])
    assert start(tag_event("yes"))["started"] is False
    assert len(executions(state_machine)) == 1


def test_execution_already_exists_from_start_execution_is_a_no_op(state_machine: str) -> None:
    # DescribeExecution missed it (the race of two duplicates): StartExecution's answer decides
    respond(aws.sfn(), "DescribeExecution", lambda _: error_response("ExecutionDoesNotExist"))
    respond(aws.sfn(), "StartExecution", lambda _: error_response("ExecutionAlreadyExists"))
    result = start(tag_event("yes"))
    assert result["started"] is False
    assert "ExecutionAlreadyExists" in result["reason"]


def test_moto_start_execution_of_a_stopped_name_raises_execution_already_exists(
    state_machine: str,
) -> None:
    """What the no-op path relies on, as moto 5.2.5 implements it (and the API reference says)."""
    first = start(tag_event("yes"))
    aws.sfn().stop_execution(executionArn=first["executionArn"])
    with pytest.raises(aws.sfn().exceptions.ExecutionAlreadyExists):
        aws.sfn().start_execution(
            stateMachineArn=state_machine,
            name=first["executionName"],
            input=json.dumps({"snapshotId": SNAPSHOT}),
        )


def test_a_new_tag_value_starts_another_execution(state_machine: str) -> None:
    first = start(tag_event("yes"))
    second = start(tag_event("again-2026-11-22"))
    assert second["started"] is True
    assert second["executionName"] != first["executionName"]
    assert len(executions(state_machine)) == 2


@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        (tag_event(resource=f"arn:aws:ec2:{REGION}:{ACCOUNT}:volume/vol-0123"), "not an EBS snap"),
        (tag_event(resource=f"arn:aws:ec2:{REGION}::image/ami-0123456789abcdef0"), "snapshots"),
        (tag_event(value=None), "no value of the trigger tag 'compact'"),
        (dict(tag_event(), resources=[]), "no resources"),
        (dict(tag_event(), detail={}), "no value of the trigger tag"),
    ],
)
def test_bad_events_start_nothing(
    state_machine: str, event: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint):
        start(event)
    assert executions(state_machine) == []


def test_the_snapshot_arn_may_carry_the_account(state_machine: str) -> None:
    event = tag_event(resource=f"arn:aws:ec2:{REGION}:{ACCOUNT}:snapshot/{SNAPSHOT}")
    assert start(event)["snapshotId"] == SNAPSHOT


def test_needs_only_its_two_variables(state_machine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # none of the workflow's settings (Config.from_env would refuse to start without them)
    for name in ("STACK_NAME", "SUBNET_IDS", "DOCUMENT_NAME", "EVENT_BUS_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert start(tag_event())["started"] is True
    monkeypatch.setenv("STATE_MACHINE_ARN", "not-an-arn")
    with pytest.raises(errors.ConfigError, match="STATE_MACHINE_ARN"):
        start(tag_event())
    monkeypatch.delenv("TRIGGER_TAG_KEY")
    with pytest.raises(errors.ConfigError, match="TRIGGER_TAG_KEY"):
        start(tag_event())


def test_execution_names_follow_the_step_functions_rules() -> None:
    longest = trigger.execution_name("snap-" + "f" * 17, "x" * 256)
    assert len(longest) <= 80
    assert all(c.isalnum() or c in "-_" for c in longest)
