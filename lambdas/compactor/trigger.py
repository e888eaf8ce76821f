"""The tag trigger (start_from_tag): one execution per snapshot and trigger-tag value.

EventBridge delivers an event at least once, and re-tagging fires again, so the start must be
idempotent. The execution name is derived from the snapshot and the tag's value:
`tag-<snapshot id>-<first 12 hex of sha256(value)>` (Step Functions names: at most 80 characters,
no whitespace, brackets, wildcards, `"#%\\^|~`$&,;:/` or control characters; this one is
[a-z0-9-] and at most 39 characters). A name is unique per state machine for 90 days, so a
duplicate event finds the execution of the first one (DescribeExecution) or gets
ExecutionAlreadyExists from StartExecution, and is a no-op that says so. To compact the same
snapshot again, set a new value of the trigger tag.

Two duplicates arriving at the same moment can both miss the DescribeExecution and both call
StartExecution: with the same name and input, Step Functions starts one execution and answers
both calls with it (StartExecution is idempotent for a running execution), so still only one
runs; both calls then report `started: true` with the same executionArn."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import ConfigError, InvalidInput
from compactor.models import StartFromTagResult
from compactor.observability import logger

# resources[0] of an EC2 "Tag Change on Resource" event (the account part may be empty)
_SNAPSHOT_ARN = re.compile(
    r"^arn:aws[a-z-]*:ec2:[a-z0-9-]+:(?:\d{12})?:snapshot/(snap-[0-9a-f]{8,17})$"
)
_STATE_MACHINE_ARN = re.compile(
    r"^(arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}):stateMachine:([A-Za-z0-9_-]{1,80})$"
)
# Step Functions' execution-name rule, narrowed to the characters CloudWatch Logs also accepts
_EXECUTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
HASH_HEX_CHARS = 12


@dataclass(frozen=True)
class TriggerConfig:
    """Only what start_from_tag needs; Config.from_env would demand every workflow setting."""

    state_machine_arn: str
    trigger_tag_key: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TriggerConfig:
        env = os.environ if environ is None else environ
        values = {
            name: env.get(name, "").strip() for name in ("STATE_MACHINE_ARN", "TRIGGER_TAG_KEY")
        }
        for name, value in values.items():
            if not value:
                raise ConfigError(
                    f"environment variable {name} is missing or empty: the stack sets it on the "
                    "start_from_tag Lambda (docs/contract.md); redeploy the stack or set it"
                )
        if not _STATE_MACHINE_ARN.match(values["STATE_MACHINE_ARN"]):
            raise ConfigError(
                f"STATE_MACHINE_ARN={values['STATE_MACHINE_ARN']!r} is not a state machine ARN "
                f"(expected {_STATE_MACHINE_ARN.pattern})"
            )
        return cls(values["STATE_MACHINE_ARN"], values["TRIGGER_TAG_KEY"])


def execution_name(snapshot_id: str, tag_value: str) -> str:
    digest = hashlib.sha256(tag_value.encode("utf-8")).hexdigest()[:HASH_HEX_CHARS]
    name = f"tag-{snapshot_id}-{digest}"
    if not _EXECUTION_NAME.match(name):  # a snapshot id is at most 22 characters: cannot happen
        raise InvalidInput(f"execution name {name!r} would be invalid")
    return name


def execution_arn(state_machine_arn: str, name: str) -> str:
    match = _STATE_MACHINE_ARN.match(state_machine_arn)
    if not match:
        raise ConfigError(f"{state_machine_arn!r} is not a state machine ARN")
    return f"{match.group(1)}:execution:{match.group(2)}:{name}"


def parse_event(event: Mapping[str, Any], trigger_tag_key: str) -> tuple[str, str]:
    """(snapshot id, trigger tag value) of an EC2 "Tag Change on Resource" event."""
    resources = event.get("resources")
    if not isinstance(resources, list) or not resources or not isinstance(resources[0], str):
        raise InvalidInput(
            f"the event has no resources[0] ARN (resources={resources!r}): start_from_tag takes "
            "the EC2 'Tag Change on Resource' event of a snapshot"
        )
    match = _SNAPSHOT_ARN.match(resources[0])
    if not match:
        raise InvalidInput(
            f"resources[0] {resources[0]!r} is not an EBS snapshot ARN: the tag trigger "
            "compacts snapshots only (start the workflow by hand for an AMI)"
        )
    detail = event.get("detail")
    event_tags = detail.get("tags") if isinstance(detail, Mapping) else None
    if not isinstance(event_tags, Mapping) or not isinstance(event_tags.get(trigger_tag_key), str):
        raise InvalidInput(
            f"the event for {match.group(1)} carries no value of the trigger tag "
            f"{trigger_tag_key!r} in detail.tags (the tag was removed, or the rule matched "
            "another key): nothing to start"
        )
    return match.group(1), str(event_tags[trigger_tag_key])


def start(event: Mapping[str, Any], config: TriggerConfig) -> StartFromTagResult:
    snapshot_id, tag_value = parse_event(event, config.trigger_tag_key)
    name = execution_name(snapshot_id, tag_value)
    arn = execution_arn(config.state_machine_arn, name)
    result: StartFromTagResult = {
        "started": False,
        "executionArn": arn,
        "executionName": name,
        "snapshotId": snapshot_id,
    }
    existing = _describe(arn)
    if existing is not None:
        return _no_op(result, f"execution {name} already exists ({existing.get('status')})")
    try:
        started = aws.sfn().start_execution(
            stateMachineArn=config.state_machine_arn,
            name=name,
            input=json.dumps({"snapshotId": snapshot_id}),
        )
    except ClientError as error:
        if aws.error_code(error) == "ExecutionAlreadyExists":
            return _no_op(result, f"execution {name} already exists (ExecutionAlreadyExists)")
        raise
    result["started"] = True
    result["executionArn"] = str(started["executionArn"])
    logger.info(
        "started", extra={"executionArn": result["executionArn"], "snapshotId": snapshot_id}
    )
    return result


def _describe(arn: str) -> dict[str, Any] | None:
    try:
        return dict(aws.sfn().describe_execution(executionArn=arn))
    except ClientError as error:
        if aws.error_code(error) == "ExecutionDoesNotExist":
            return None
        raise


def _no_op(result: StartFromTagResult, why: str) -> StartFromTagResult:
    result["reason"] = (
        f"{why}: this snapshot was already started with this value of the trigger tag (a "
        "repeated event or the same tag set again); set a new value to compact it again"
    )
    logger.info("not started", extra={"executionArn": result["executionArn"], "reason": why})
    return result
