"""sweep: the scheduled safety net. Finds what executions of this stack left behind and tears it
down with compactor.teardown, once the execution has ended and a grace period has passed.

What it looks at: everything tagged `ebs-snapshot-compactor:stack` = this stack (paginated
DescribeInstances, DescribeVolumes, DescribeSnapshots OwnerIds=self, DescribeImages Owners=self),
minus what is gone (terminated instances, deleted volumes, deregistered AMIs) and minus the
delivered outputs: a snapshot or AMI tagged `ebs-snapshot-compactor:delivered`, and every AMI of
an execution that delivered a snapshot. What is left is grouped by the execution tag.

For each execution it asks Step Functions (DescribeExecution on the main state machine):
- RUNNING or PENDING_REDRIVE: kept (the execution still owns it).
- ended (SUCCEEDED, FAILED, TIMED_OUT, ABORTED) less than the grace period ago: kept (its own
  teardown or the cleanup state machine may still be at it).
- ended longer ago: torn down. SUCCEEDED with teardown outcome `success` (instance, volumes,
  block lists, snapshots in state `error`: never an output), the others with `cleanup` (also the
  undelivered snapshots and AMIs). A pending direct snapshot that EC2 will not delete (teardown's
  `leftToTimeOut`) counts as `remaining`: it turns `error` after
  limits.directSnapshotTimeoutMinutes without a write, and a later run deletes it. Teardown
  itself never deletes a delivered snapshot or an AMI of a delivered execution.
- not found (ExecutionDoesNotExist: never started, older than Step Functions keeps executions, or
  started a moment ago and not visible yet - DescribeExecution is eventually consistent): torn
  down with `cleanup` only when its youngest resource is older than the grace period.
- no answer (status UNKNOWN: DescribeExecution refused the ARN as invalid, or was throttled):
  kept (`kept-unknown`). Only Step Functions' own answer proves an execution ended: every tag
  value is asked about as it is, whatever characters StartExecution allowed in the name
  (`release-1.2.3`, non-ASCII letters), never judged by a pattern here.
Resources with the stack tag but no execution tag are reported (`untracked`), never touched:
teardown works by execution.

One run tears down at most limits.sweepMaxExecutionsPerRun executions (the oldest first); the
rest, and what answered "not now" (teardown's `remaining`), wait for the next run."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from botocore.exceptions import ClientError

from compactor import aws, contract, tags, teardown
from compactor.errors import ConfigError
from compactor.observability import logger
from compactor.report import events

KEEP_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})
NOT_FOUND = "NOT_FOUND"
UNKNOWN = "UNKNOWN"
_STATE_MACHINE_ARN = re.compile(r"^(arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}):stateMachine:(.+)$")
# teardown's result lists that count as removed, and the resource type each holds
REMOVED_LISTS = {
    "terminatedInstances": "instance",
    "deletedVolumes": "volume",
    "deletedSnapshots": "snapshot",
    "deregisteredImages": "image",
    "deletedObjects": "object",
}


class RemovedResource(TypedDict):
    type: str
    id: str


class SweepExecution(TypedDict):
    executionName: str
    status: str
    stoppedAt: str | None
    action: str
    found: dict[str, list[str]]
    teardownOutcome: str | None
    removed: list[RemovedResource]
    remaining: int


class SweepResult(TypedDict):
    """contract/schemas/results/sweep.schema.json"""

    stackName: str
    checkedAt: str
    graceMinutes: int
    removed: int
    remaining: int
    executions: list[SweepExecution]
    untracked: list[str]


@dataclass(frozen=True)
class SweepConfig:
    stack_name: str
    state_machine_arn: str
    bucket: str
    grace: timedelta
    event_bus_name: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SweepConfig:
        env = os.environ if environ is None else environ
        names = (
            "STACK_NAME",
            "STATE_MACHINE_ARN",
            "SOURCE_BLOCKS_BUCKET",
            "SWEEP_GRACE_MINUTES",
            "EVENT_BUS_NAME",
        )
        values = {name: env.get(name, "").strip() for name in names}
        for name, value in values.items():
            if not value:
                raise ConfigError(
                    f"environment variable {name} is missing or empty: the stack sets it on the "
                    "sweep Lambda (docs/contract.md); redeploy the stack or set it"
                )
        if not _STATE_MACHINE_ARN.match(values["STATE_MACHINE_ARN"]):
            raise ConfigError(
                f"STATE_MACHINE_ARN={values['STATE_MACHINE_ARN']!r} is not a state machine ARN"
            )
        grace = values["SWEEP_GRACE_MINUTES"]
        if not grace.isdigit() or int(grace) < contract.limit("sweepGraceMinutesMin"):
            raise ConfigError(
                f"SWEEP_GRACE_MINUTES={grace!r} must be a whole number of minutes, at least "
                f"{contract.limit('sweepGraceMinutesMin')}"
            )
        return cls(
            values["STACK_NAME"],
            values["STATE_MACHINE_ARN"],
            values["SOURCE_BLOCKS_BUCKET"],
            timedelta(minutes=int(grace)),
            values["EVENT_BUS_NAME"],
        )


@dataclass
class Group:
    """What one execution left: resource ids by type, and when the youngest was created."""

    execution_name: str
    resources: dict[str, list[str]] = field(default_factory=dict)
    youngest: datetime | None = None
    failed_snapshots: list[str] = field(default_factory=list)

    def add(self, kind: str, resource_id: str, created: Any, state: str | None = None) -> None:
        self.resources.setdefault(kind, []).append(resource_id)
        if kind == "snapshot" and state == "error":
            self.failed_snapshots.append(resource_id)
        when = _as_datetime(created)
        if when and (self.youngest is None or when > self.youngest):
            self.youngest = when

    @property
    def has_work_resources(self) -> bool:
        """What teardown `success` removes: the instance, the volumes, and snapshots in state
        error (a direct snapshot EBS cancelled, e.g. one a relaunch left to its timeout)."""
        return bool(
            self.resources.get("instance") or self.resources.get("volume") or self.failed_snapshots
        )


def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


def _stack_filter(stack_name: str) -> list[Any]:
    return [{"Name": f"tag:{tags.STACK}", "Values": [stack_name]}]


def _pages(operation: str, **kwargs: Any) -> Iterator[Mapping[str, Any]]:
    client: Any = aws.ec2()  # the operation is one of four Describe* with paginators
    yield from client.get_paginator(operation).paginate(**kwargs)


def find(stack_name: str) -> tuple[dict[str, Group], list[str]]:
    """The stack's leftovers grouped by execution, and the ids without an execution tag."""
    groups: dict[str, Group] = {}
    untracked: list[str] = []

    def add(
        kind: str,
        resource_id: str,
        resource_tags: Mapping[str, str],
        created: Any,
        state: str | None,
    ) -> None:
        execution = resource_tags.get(tags.EXECUTION)
        if not execution:
            untracked.append(resource_id)
            return
        groups.setdefault(execution, Group(execution)).add(kind, resource_id, created, state)

    for kind, resource_id, resource_tags, created, state in _leftovers(stack_name):
        if resource_tags.get(tags.STACK) == stack_name:  # the filter again, in case it lags
            add(kind, resource_id, resource_tags, created, state)
    return groups, untracked


def _leftovers(stack_name: str) -> Iterator[tuple[str, str, dict[str, str], Any, str | None]]:
    """(kind, id, tags, creation time, state) of everything with the stack tag that is not gone
    and not a delivered output."""
    owned = _stack_filter(stack_name)
    for page in _pages("describe_instances", Filters=owned):
        for reservation in page["Reservations"]:
            for i in reservation.get("Instances", []):
                if i.get("State", {}).get("Name") != "terminated":
                    yield (
                        "instance",
                        i["InstanceId"],
                        tags.from_aws(i.get("Tags")),
                        i.get("LaunchTime"),
                        None,
                    )
    for page in _pages("describe_volumes", Filters=owned):
        for v in page["Volumes"]:
            if v.get("State") != "deleted":
                yield (
                    "volume",
                    v["VolumeId"],
                    tags.from_aws(v.get("Tags")),
                    v.get("CreateTime"),
                    None,
                )
    delivered_executions: set[str] = set()
    for page in _pages("describe_snapshots", OwnerIds=["self"], Filters=owned):
        for s in page["Snapshots"]:
            snapshot_tags = tags.from_aws(s.get("Tags"))
            if tags.is_delivered(snapshot_tags):
                delivered_executions.add(snapshot_tags.get(tags.EXECUTION, ""))
                continue
            yield "snapshot", s["SnapshotId"], snapshot_tags, s.get("StartTime"), s.get("State")
    for page in _pages("describe_images", Owners=["self"], Filters=owned):
        for image in page["Images"]:
            image_tags = tags.from_aws(image.get("Tags"))
            if image.get("State") == "deregistered":
                continue
            if tags.is_delivered(image_tags):
                continue  # registered delivered (register_image): an output
            if image_tags.get(tags.EXECUTION, "") in delivered_executions:
                continue  # an AMI of a delivered execution is an output
            yield "image", image["ImageId"], image_tags, image.get("CreationDate"), None


def execution_status(state_machine_arn: str, execution_name: str) -> tuple[str, datetime | None]:
    """(status, stopDate) of the main state machine's execution; NOT_FOUND when Step Functions
    says it does not exist, UNKNOWN when it gives no answer (an ARN it refuses, throttling)."""
    match = _STATE_MACHINE_ARN.match(state_machine_arn)
    if not match:  # SweepConfig.from_env checked it
        raise ConfigError(f"{state_machine_arn!r} is not a state machine ARN")
    prefix, machine = match.groups()
    arn = f"{prefix}:execution:{machine}:{execution_name}"
    try:
        answer = aws.sfn().describe_execution(executionArn=arn)
    except ClientError as error:
        code = aws.error_code(error)
        if code == "ExecutionDoesNotExist":
            return NOT_FOUND, None
        if code == "InvalidArn" or aws.is_transient(error):
            logger.warning(
                "DescribeExecution gave no answer: the resources are kept",
                extra={"executionName": execution_name, "error": code},
            )
            return UNKNOWN, None
        raise
    return str(answer["status"]), _as_datetime(answer.get("stopDate"))


def decide(
    group: Group, status: str, stopped: datetime | None, now: datetime, grace: timedelta
) -> tuple[str, str | None]:
    """(action, teardown outcome): what to do with an execution's leftovers."""
    if status in KEEP_STATUSES:
        return "kept-running", None
    if status == UNKNOWN:
        return "kept-unknown", None
    ended = stopped if status != NOT_FOUND else group.youngest
    if ended is None and status != NOT_FOUND:
        return "kept-grace", None  # ended without a stopDate: cannot time it, ask next run
    if ended is not None and now - ended < grace:
        return "kept-grace", None
    if status == "SUCCEEDED":
        # success mode removes only the instance, the volumes and the block lists
        return ("sweep", "success") if group.has_work_resources else ("kept-outputs", None)
    return "sweep", "cleanup"


def sweep(config: SweepConfig, now: datetime, max_executions: int | None = None) -> SweepResult:
    """Tears down at most `max_executions` (default limits.sweepMaxExecutionsPerRun)."""
    groups, untracked = find(config.stack_name)
    if untracked:
        logger.warning(
            "resources with the stack tag but no execution tag", extra={"ids": untracked}
        )
    cap = contract.limit("sweepMaxExecutionsPerRun") if max_executions is None else max_executions
    executions: list[SweepExecution] = []
    swept = 0
    oldest_first = sorted(groups.values(), key=lambda g: g.youngest or now)
    for group in oldest_first:
        status, stopped = execution_status(config.state_machine_arn, group.execution_name)
        action, outcome = decide(group, status, stopped, now, config.grace)
        if action == "sweep" and swept >= cap:
            action, outcome = "deferred", None
        entry = _entry(group, status, stopped, action)
        if outcome is not None:
            swept += 1
            _tear_down(config, group, outcome, entry)
        executions.append(entry)
    return {
        "stackName": config.stack_name,
        "checkedAt": now.isoformat(),
        "graceMinutes": int(config.grace.total_seconds() // 60),
        "removed": sum(len(e["removed"]) for e in executions),
        "remaining": sum(e["remaining"] for e in executions),
        "executions": executions,
        "untracked": untracked,
    }


def _entry(group: Group, status: str, stopped: datetime | None, action: str) -> SweepExecution:
    return {
        "executionName": group.execution_name,
        "status": status,
        "stoppedAt": stopped.isoformat() if stopped else None,
        "action": action,
        "found": {kind: sorted(ids) for kind, ids in sorted(group.resources.items())},
        "teardownOutcome": None,
        "removed": [],
        "remaining": 0,
    }


def _tear_down(config: SweepConfig, group: Group, outcome: str, entry: SweepExecution) -> None:
    result = teardown.teardown(
        config.stack_name, group.execution_name, outcome, teardown.Keep(), config.bucket
    )
    removed = list(_removed(result))
    for kind, resource_id in removed:
        logger.info(
            "swept",
            extra={
                "executionName": group.execution_name,
                "status": entry["status"],
                "resourceType": kind,
                "resourceId": resource_id,
            },
        )
    entry["teardownOutcome"] = outcome
    entry["removed"] = [{"type": kind, "id": resource_id} for kind, resource_id in removed]
    # a pending snapshot teardown had to leave to its timeout waits for the next run, too
    entry["remaining"] = result["remaining"] + len(result.get("leftToTimeOut") or [])


def _removed(result: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for key, kind in REMOVED_LISTS.items():
        for resource_id in result.get(key) or []:
            yield kind, str(resource_id)


SWEPT_DETAIL_TYPE = "EBS Snapshot Compactor Resources Swept"


def publish(result: SweepResult, event_bus_name: str) -> str | None:
    """The Swept event (only when the run removed something or left something): the result with
    just the executions it tore down. Raises PublishFailed when PutEvents refuses it."""
    if not result["removed"] and not result["remaining"]:
        return None
    detail = {
        **result,
        "executions": [e for e in result["executions"] if e["teardownOutcome"] is not None],
    }
    answer = aws.events().put_events(
        Entries=[
            {
                "Source": events.SOURCE,
                "DetailType": SWEPT_DETAIL_TYPE,
                "Detail": json.dumps(detail),
                "EventBusName": event_bus_name,
            }
        ]
    )
    entries = answer.get("Entries", [])
    if answer.get("FailedEntryCount", 0) or not entries or not entries[0].get("EventId"):
        reasons = "; ".join(f"{e.get('ErrorCode')}: {e.get('ErrorMessage')}" for e in entries)
        raise events.PublishFailed(
            f"PutEvents to {event_bus_name} did not accept the Swept event "
            f"({reasons or 'no entry'})"
        )
    return str(entries[0]["EventId"])
