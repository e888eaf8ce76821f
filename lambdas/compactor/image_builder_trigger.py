"""The Image Builder trigger (start_from_image_builder): an EC2 Image Builder image of a listed
pipeline became AVAILABLE → one execution per AMI it distributed to this Region and account.

The event ("EC2 Image Builder Image State Change", source aws.imagebuilder) names only the image
build version (resources[0], `arn:...:imagebuilder:REGION:ACCOUNT:image/NAME/X.Y.Z/BUILD`) and
its new and previous status (detail.state.status, detail."previous-state".status): not the
pipeline and not the AMIs. So GetImage reads both: `sourcePipelineArn` must be one of the stack's
`imageBuilderPipelineArns` (an image of another pipeline, or built without one, is ignored and
the result says why) and `outputResources.amis` lists the AMIs by Region and account.

Idempotent like the tag trigger (compactor/trigger.py): the execution name is `imagebuilder-<AMI
id>` (an AMI id is never reused, at most 34 characters), so a repeated event finds the execution
of the first one (DescribeExecution) or gets ExecutionAlreadyExists, and starts nothing."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import ConfigError, InvalidInput
from compactor.models import ImageBuilderStart, StartFromImageBuilderResult
from compactor.observability import logger
from compactor.trigger import execution_arn

IMAGE_ARN = re.compile(
    r"^arn:aws[a-z-]*:imagebuilder:[a-z0-9-]+:\d{12}:image/[a-z0-9_-]+/\d+\.\d+\.\d+/\d+$"
)
PIPELINE_ARN = re.compile(
    r"^arn:aws[a-z-]*:imagebuilder:[a-z0-9-]+:\d{12}:image-pipeline/[a-z0-9_-]+$"
)
_STATE_MACHINE_ARN = re.compile(
    r"^arn:aws[a-z-]*:states:([a-z0-9-]+):(\d{12}):stateMachine:[A-Za-z0-9_-]{1,80}$"
)
EXECUTION_PREFIX = "imagebuilder-"
AVAILABLE = "AVAILABLE"


@cache
def imagebuilder() -> Any:
    # typed Any: mypy-boto3-imagebuilder is not among the dev requirements
    return boto3.client(
        "imagebuilder", config=BotoConfig(retries={"mode": "standard", "max_attempts": 5})
    )


@dataclass(frozen=True)
class ImageBuilderConfig:
    """Only what start_from_image_builder needs (contract/environment.json)."""

    state_machine_arn: str
    pipeline_arns: tuple[str, ...]
    copy_sharing: bool

    @property
    def region(self) -> str:
        return _STATE_MACHINE_ARN.match(self.state_machine_arn).group(1)  # type: ignore[union-attr]

    @property
    def account(self) -> str:
        return _STATE_MACHINE_ARN.match(self.state_machine_arn).group(2)  # type: ignore[union-attr]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ImageBuilderConfig:
        env = os.environ if environ is None else environ
        names = ("STATE_MACHINE_ARN", "IMAGE_BUILDER_PIPELINE_ARNS", "IMAGE_BUILDER_COPY_SHARING")
        values = {name: env.get(name, "").strip() for name in names}
        for name, value in values.items():
            if not value:
                raise ConfigError(
                    f"environment variable {name} is missing or empty: the stack sets it on the "
                    "start_from_image_builder Lambda (docs/contract.md); redeploy the stack"
                )
        if not _STATE_MACHINE_ARN.match(values["STATE_MACHINE_ARN"]):
            raise ConfigError(
                f"STATE_MACHINE_ARN={values['STATE_MACHINE_ARN']!r} is not a state machine ARN"
            )
        pipelines = tuple(p.strip() for p in values["IMAGE_BUILDER_PIPELINE_ARNS"].split(","))
        bad = [p for p in pipelines if not PIPELINE_ARN.match(p)]
        if bad:
            raise ConfigError(
                f"IMAGE_BUILDER_PIPELINE_ARNS: {', '.join(bad)} are not image pipeline ARNs"
            )
        sharing = values["IMAGE_BUILDER_COPY_SHARING"]
        if sharing not in ("true", "false"):
            raise ConfigError(f"IMAGE_BUILDER_COPY_SHARING={sharing!r}: use true or false")
        return cls(values["STATE_MACHINE_ARN"], pipelines, sharing == "true")


def parse_event(event: Mapping[str, Any]) -> str:
    """The image build version ARN of an "EC2 Image Builder Image State Change" to AVAILABLE."""
    resources = event.get("resources")
    arn = resources[0] if isinstance(resources, list) and resources else None
    if not isinstance(arn, str) or not IMAGE_ARN.match(arn):
        raise InvalidInput(
            f"the event's resources[0] ({arn!r}) is not an Image Builder image build version ARN: "
            "start_from_image_builder takes the 'EC2 Image Builder Image State Change' event"
        )
    detail = event.get("detail")
    state = detail.get("state") if isinstance(detail, Mapping) else None
    status = state.get("status") if isinstance(state, Mapping) else None
    if status != AVAILABLE:
        raise InvalidInput(
            f"the event says image {arn} is {status!r}, not {AVAILABLE}: the rule matches only "
            "AVAILABLE; nothing to start"
        )
    return arn


def execution_name(image_id: str) -> str:
    return f"{EXECUTION_PREFIX}{image_id}"


def start(event: Mapping[str, Any], config: ImageBuilderConfig) -> StartFromImageBuilderResult:
    arn = parse_event(event)
    image = imagebuilder().get_image(imageBuildVersionArn=arn)["image"]
    pipeline = image.get("sourcePipelineArn")
    result: StartFromImageBuilderResult = {
        "imageBuildVersionArn": arn,
        "pipelineArn": pipeline,
        "executions": [],
        "ignored": None,
    }
    status = image.get("state", {}).get("status")
    if pipeline not in config.pipeline_arns:
        result["ignored"] = (
            f"image {arn} was built by {pipeline or 'no pipeline'}, not by one of the stack's "
            f"imageBuilderPipelineArns ({', '.join(config.pipeline_arns)})"
        )
    elif status != AVAILABLE:
        result["ignored"] = f"GetImage says image {arn} is {status}, not {AVAILABLE} any more"
    if result["ignored"]:
        logger.info("not started", extra={"reason": result["ignored"]})
        return result
    amis = [
        str(a["image"])
        for a in image.get("outputResources", {}).get("amis", [])
        if a.get("region") == config.region
        and a.get("accountId", config.account) == config.account
        and a.get("image")
    ]
    if not amis:
        result["ignored"] = f"image {arn} distributed no AMI to {config.account} in {config.region}"
    result["executions"] = [_start_one(ami, config) for ami in amis]
    return result


def _start_one(image_id: str, config: ImageBuilderConfig) -> ImageBuilderStart:
    name = execution_name(image_id)
    arn = execution_arn(config.state_machine_arn, name)
    entry: ImageBuilderStart = {
        "imageId": image_id,
        "executionName": name,
        "executionArn": arn,
        "started": False,
    }
    try:
        existing = aws.sfn().describe_execution(executionArn=arn)
        entry["reason"] = (
            f"execution {name} already exists ({existing.get('status')}): a repeated event"
        )
        return entry
    except ClientError as error:
        if aws.error_code(error) != "ExecutionDoesNotExist":
            raise
    execution_input = {"imageId": image_id, "copySharing": config.copy_sharing}
    try:
        started = aws.sfn().start_execution(
            stateMachineArn=config.state_machine_arn, name=name, input=json.dumps(execution_input)
        )
    except ClientError as error:
        if aws.error_code(error) != "ExecutionAlreadyExists":
            raise
        entry["reason"] = (
            f"execution {name} already exists (ExecutionAlreadyExists): a repeated event"
        )
        return entry
    entry["started"] = True
    entry["executionArn"] = str(started["executionArn"])
    logger.info("started", extra={"executionArn": entry["executionArn"], "imageId": image_id})
    return entry
