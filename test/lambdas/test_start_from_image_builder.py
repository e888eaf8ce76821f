"""start_from_image_builder: Image Builder's GetImage played back with botocore's Stubber (moto has
no Image Builder), executions started in moto's Step Functions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber
from compactor import aws, errors, image_builder_trigger
from compactor.handlers import start_from_image_builder
from conftest import REGION
from moto import mock_aws
from support import FakeLambdaContext, error_response, respond

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"
PIPELINE = f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image-pipeline/golden-al2023"
OTHER_PIPELINE = f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image-pipeline/someone-elses"
IMAGE = f"arn:aws:imagebuilder:{REGION}:{ACCOUNT}:image/golden-al2023-recipe/1.0.3/7"
AMI = "ami-0123456789abcdef0"
AMI_WEST = "ami-0fedcba9876543210"
AMI_OTHER_ACCOUNT = "ami-0aaaabbbbccccdddd"
DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})


@pytest.fixture
def state_machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with mock_aws():
        aws.reset_clients()
        image_builder_trigger.imagebuilder.cache_clear()
        arn = aws.sfn().create_state_machine(
            name="compactor-test-Workflow",
            definition=DEFINITION,
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/compactor-test-workflow",
        )["stateMachineArn"]
        monkeypatch.setenv("STATE_MACHINE_ARN", arn)
        monkeypatch.setenv("IMAGE_BUILDER_PIPELINE_ARNS", f"{PIPELINE},{OTHER_PIPELINE[:-1]}x")
        monkeypatch.setenv("IMAGE_BUILDER_COPY_SHARING", "true")
        yield str(arn)


def state_change(status: str = "AVAILABLE", resource: str = IMAGE) -> dict[str, Any]:
    """The "EC2 Image Builder Image State Change" event as the EventBridge reference shows it."""
    return {
        "version": "0",
        "id": "a1b2c3d4-5678-90ab-cdef-EXAMPLE11111",
        "detail-type": "EC2 Image Builder Image State Change",
        "source": "aws.imagebuilder",
        "account": ACCOUNT,
        "time": "2026-11-22T17:50:56Z",
        "region": REGION,
        "resources": [resource],
        "detail": {"previous-state": {"status": "TESTING"}, "state": {"status": status}},
    }


def image(pipeline: str | None = PIPELINE, status: str = "AVAILABLE") -> dict[str, Any]:
    """GetImage's answer: AMIs distributed here, to another Region and to another account."""
    found: dict[str, Any] = {
        "arn": IMAGE,
        "name": "golden-al2023-recipe",
        "version": "1.0.3/7",
        "state": {"status": status},
        "outputResources": {
            "amis": [
                {"region": REGION, "image": AMI, "name": "golden", "accountId": ACCOUNT},
                {"region": "us-west-2", "image": AMI_WEST, "name": "golden", "accountId": ACCOUNT},
                {"region": REGION, "image": AMI_OTHER_ACCOUNT, "accountId": OTHER_ACCOUNT},
            ]
        },
    }
    if pipeline:
        found["sourcePipelineArn"] = pipeline
    return found


def run(event: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    client = image_builder_trigger.imagebuilder()
    with Stubber(client) as stub:
        stub.add_response("get_image", {"image": answer}, {"imageBuildVersionArn": IMAGE})
        result = start_from_image_builder.handler(event, FakeLambdaContext())
        stub.assert_no_pending_responses()
    return result


def test_starts_one_execution_per_ami_of_this_region_and_account(state_machine: str) -> None:
    result = run(state_change(), image())
    assert result["pipelineArn"] == PIPELINE and result["ignored"] is None
    (entry,) = result["executions"]
    assert entry["imageId"] == AMI and entry["started"] is True
    assert entry["executionName"] == f"imagebuilder-{AMI}"
    described = aws.sfn().describe_execution(executionArn=entry["executionArn"])
    assert json.loads(described["input"]) == {"imageId": AMI, "copySharing": True}
    executions = aws.sfn().list_executions(stateMachineArn=state_machine)["executions"]
    assert [e["name"] for e in executions] == [f"imagebuilder-{AMI}"]


def test_a_repeated_event_starts_nothing(state_machine: str) -> None:
    first = run(state_change(), image())
    again = run(state_change(), image())
    (entry,) = again["executions"]
    assert entry["started"] is False
    assert entry["executionArn"] == first["executions"][0]["executionArn"]
    assert "already exists" in entry["reason"]
    assert len(aws.sfn().list_executions(stateMachineArn=state_machine)["executions"]) == 1


def test_a_race_lost_to_a_duplicate_is_no_error(state_machine: str) -> None:
    respond(
        aws.sfn(),
        "StartExecution",
        lambda _: error_response("ExecutionAlreadyExists", "Execution Already Exists"),
    )
    (entry,) = run(state_change(), image())["executions"]
    assert entry["started"] is False
    assert "ExecutionAlreadyExists" in entry["reason"]


@pytest.mark.parametrize("pipeline", [OTHER_PIPELINE, None])
def test_an_image_of_another_pipeline_is_ignored(state_machine: str, pipeline: str | None) -> None:
    result = run(state_change(), image(pipeline=pipeline))
    assert result["executions"] == []
    assert "not by one of the stack's imageBuilderPipelineArns" in str(result["ignored"])
    assert aws.sfn().list_executions(stateMachineArn=state_machine)["executions"] == []


def test_an_image_no_longer_available_is_ignored(state_machine: str) -> None:
    result = run(state_change(), image(status="DEPRECATED"))
    assert result["executions"] == [] and "not AVAILABLE any more" in str(result["ignored"])


def test_no_ami_here_is_said(state_machine: str) -> None:
    answer = image()
    answer["outputResources"]["amis"] = answer["outputResources"]["amis"][1:]
    result = run(state_change(), answer)
    assert result["executions"] == []
    assert f"no AMI to {ACCOUNT} in {REGION}" in str(result["ignored"])


@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        (state_change(status="FAILED"), "'FAILED', not AVAILABLE"),
        (state_change(resource=f"arn:aws:ec2:{REGION}::image/{AMI}"), "not an Image Builder"),
        ({"detail": {}}, "not an Image Builder"),
    ],
)
def test_another_event_is_invalid_input(
    state_machine: str, event: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint):
        start_from_image_builder.handler(event, FakeLambdaContext())


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("IMAGE_BUILDER_PIPELINE_ARNS", "", "missing or empty"),
        ("IMAGE_BUILDER_PIPELINE_ARNS", f"{IMAGE}", "not image pipeline ARNs"),
        ("IMAGE_BUILDER_COPY_SHARING", "yes", "use true or false"),
        ("STATE_MACHINE_ARN", "arn:aws:states:us-east-1:1:nope", "not a state machine ARN"),
    ],
)
def test_a_bad_environment_is_a_config_error(
    state_machine: str, monkeypatch: pytest.MonkeyPatch, name: str, value: str, complaint: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(errors.ConfigError, match=complaint):
        image_builder_trigger.ImageBuilderConfig.from_env()


def test_copy_sharing_follows_the_setting(
    state_machine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGE_BUILDER_COPY_SHARING", "false")
    (entry,) = run(state_change(), image())["executions"]
    described = aws.sfn().describe_execution(executionArn=entry["executionArn"])
    assert json.loads(described["input"])["copySharing"] is False
