"""start_compaction / check_compaction: SendCommand of the Command document and its outcome.
With target snapshot, start_compaction first starts the direct snapshots the job writes
(compactor/direct_snapshots.py) and check_compaction checks the job wrote exactly those.

The document prints exactly one JSON line on standard output (docs/contract.md, "Command
document"): {"volumes": [...]} on success, {"error": ..., "sourceVolumeId": ...} on failure."""

from __future__ import annotations

import json
from typing import Any, cast

from aws_lambda_powertools.utilities.validation.exceptions import SchemaValidationError
from botocore.exceptions import ClientError

from compactor import aws, direct_snapshots, schemas, source_blocks
from compactor.config import Config
from compactor.ec2.instances import describe, instance_arn, raise_if_lost
from compactor.errors import CompactionFailed, InstanceNotReady, InvalidInput, SnapshotFailed
from compactor.models import (
    AttachedVolume,
    AttachResult,
    CommandResult,
    CompactionProgress,
    CompactionResult,
    InstanceResult,
    Plan,
    SnapshotItem,
    SourceBlocksResult,
    Summary,
)
from compactor.observability import logger
from compactor.ssm import progress
from compactor.volumes import has_target_volumes, writes_direct_snapshots

# How long SSM may take to deliver the command to the agent; the run itself is bounded by the
# document's TimeoutSeconds parameter (its default, 172,800 s, is kept).
DELIVERY_TIMEOUT_SECONDS = 600
# GetCommandInvocation's Status values that are not final: Delayed = SSM will deliver again;
# Cancelling = a cancel was asked for and the plugin is still running (the document may still write)
RUNNING_STATUSES = frozenset({"Pending", "InProgress", "Delayed", "Cancelling"})


def document_parameters(
    plan: Plan,
    attached: AttachResult,
    source_blocks_url: str,
    program_url: str,
    direct: list[SnapshotItem] | None = None,
) -> dict[str, list[str]]:
    """direct: the direct snapshots start() started (target snapshot), in index order."""
    volumes = sorted(attached["volumes"], key=lambda v: v["index"])
    sources = ",".join(v["sourceVolumeId"] for v in volumes)
    source_names = ",".join(v["sourceDeviceName"] for v in volumes)
    # a dry run has no targets: inspect mode never looks at them, the sources fill the lists
    # (and a document without the Mode parameter would refuse to copy a device onto itself)
    dry_run = bool(plan.get("dryRun"))
    target_volumes, target_names = sources, source_names
    if has_target_volumes(plan):
        target_volumes = ",".join(_targets(volumes, "targetVolumeId"))
        target_names = ",".join(_targets(volumes, "targetDeviceName"))
    elif not dry_run:  # target snapshot: no target volume, the snapshots instead
        target_volumes = target_names = ""
    return {
        "ProgramUrl": [program_url],
        "SourceBlocksUrl": [source_blocks_url],
        "SourceVolumeIds": [sources],
        "TargetVolumeIds": [target_volumes],
        "SourceDeviceNames": [source_names],
        "TargetDeviceNames": [target_names],
        "Method": [plan["method"]],
        "Jobs": [str(plan["jobs"])],
        "Verify": ["true" if plan["verify"] else "false"],
        "Mode": ["inspect" if dry_run else "copy"],
        # a dry run inspects whatever the target: the document's default, as before
        "Target": ["volume" if dry_run or direct is None else "snapshot"],
        "TargetSnapshotIds": [",".join(i["snapshotId"] for i in direct or [])],
    }


def _targets(volumes: list[AttachedVolume], key: str) -> list[str]:
    values = [v.get(key) for v in volumes]
    if not all(isinstance(value, str) for value in values):
        raise InvalidInput(
            f"a volume has no {key}: a workflow bug (only a dry run and target snapshot have none)"
        )
    return [str(value) for value in values]


def start(
    plan: Plan,
    instance: InstanceResult,
    attached: AttachResult,
    listed: SourceBlocksResult,
    config: Config,
    launch_attempt: int = 1,
) -> CommandResult:
    """SendCommand of the document; with target snapshot, StartSnapshot of every volume's new
    snapshot first (the command names them; a retried call gets the same ones back)."""
    if not attached.get("done") or len(attached["volumes"]) != len(plan["volumes"]):
        raise InstanceNotReady(
            f"the volumes of instance {instance['instanceId']} are not all attached "
            f"(attached={attached}): this is a workflow bug, start_compaction runs only after "
            "attach_volumes says done"
        )
    if not listed.get("complete") or not listed.get("bundleKey"):
        raise InvalidInput(
            "the source block lists are not complete: this is a workflow bug, start_compaction "
            "runs only after list_source_blocks says complete"
        )
    url = source_blocks.presigned_url(config.source_blocks_bucket, str(listed["bundleKey"]))
    # the data-plane program (the stack's file asset); the document runs it only if its SHA-256 is
    # the one pinned at synth
    program_url = source_blocks.presigned_url(config.program_bucket, config.program_key)
    direct = (
        direct_snapshots.start(plan, launch_attempt, config, instance_arn(instance["instanceId"]))
        if writes_direct_snapshots(plan)
        else None
    )
    command = aws.ssm().send_command(
        InstanceIds=[instance["instanceId"]],
        DocumentName=config.document_name,
        Parameters=document_parameters(plan, attached, url, program_url, direct),
        TimeoutSeconds=DELIVERY_TIMEOUT_SECONDS,
        Comment=f"ebs-snapshot-compactor {plan['executionName']}"[:100],
        CloudWatchOutputConfig={
            "CloudWatchOutputEnabled": True,
            "CloudWatchLogGroupName": config.command_log_group,
        },
    )["Command"]
    return {"commandId": command["CommandId"], "directSnapshots": direct or []}


def check(
    instance: InstanceResult,
    command: CommandResult,
    log_group: str = "",
    previous: CompactionProgress | None = None,
) -> CompactionResult:
    """Not done while the invocation runs (RUNNING_STATUSES), while it does not exist yet (right
    after SendCommand), or when a call got a throttling or 5xx answer (`transientError`; the poll
    loop's bound still applies). Every result carries the data plane's latest progress from the
    command's log group (`previous` when it cannot be read: compactor/ssm/progress.py)."""
    try:
        found = describe(instance["instanceId"])
    except ClientError as error:
        if aws.is_transient(error):
            return _not_done_yet("DescribeInstances", error, previous)
        raise
    if found is not None:
        raise_if_lost(found)
    try:
        invocation = aws.ssm().get_command_invocation(
            CommandId=command["commandId"], InstanceId=instance["instanceId"]
        )
    except ClientError as error:
        # right after SendCommand the invocation may not exist yet
        if aws.error_code(error) == "InvocationDoesNotExist":
            return {"done": False, "status": "Pending", "summary": None, "progress": previous}
        if aws.is_transient(error):
            return _not_done_yet("GetCommandInvocation", error, previous)
        raise
    latest = previous
    if log_group and invocation.get("PluginName"):
        latest = progress.read(
            log_group,
            command["commandId"],
            instance["instanceId"],
            invocation["PluginName"],
            previous,
        )
    result = _outcome(invocation, latest)
    if result["done"] and result["summary"] is not None:
        check_direct_snapshots(command, result["summary"])
    elif not result["done"]:
        transient = raise_if_a_direct_snapshot_failed(command)
        if transient:
            result["transientError"] = transient
    return result


def raise_if_a_direct_snapshot_failed(command: CommandResult) -> str | None:
    """Target snapshot, while the command runs: SnapshotFailed when EBS put one of the direct
    snapshots in state error (cancelled after its idle timeout, or failed after completion): the
    job cannot tell (the instance role has no ec2:DescribeSnapshots) and would wait out the
    compaction bound. Returns the message of a throttled/5xx answer (not checked this time)."""
    snapshot_ids = direct_snapshots.direct_snapshot_ids(command)
    if not snapshot_ids:
        return None
    try:
        described = aws.ec2().describe_snapshots(SnapshotIds=snapshot_ids)["Snapshots"]
    except ClientError as error:
        # right after StartSnapshot DescribeSnapshots may not list it yet
        if aws.is_transient(error) or aws.error_code(error) == "InvalidSnapshot.NotFound":
            return f"DescribeSnapshots: {aws.error_code(error)}: {aws.error_message(error)}"
        raise
    for snapshot in described:
        if snapshot.get("State") == "error":
            raise SnapshotFailed(
                f"direct snapshot {snapshot['SnapshotId']} is in state error "
                f"({snapshot.get('StateMessage') or 'no StateMessage given'}) while the copy "
                "runs: EBS cancelled it (nothing written to it for "
                f"{direct_snapshots.TIMEOUT_MINUTES} minutes, or not completed that long after "
                "its last block) or could not seal it; start the workflow again"
            )
    return None


def check_direct_snapshots(command: CommandResult, summary: Summary) -> None:
    """Target snapshot: the job must report, volume by volume in index order, exactly the direct
    snapshots start_compaction started (`targetSnapshotId`); else CompactionFailed (the job
    wrote elsewhere, or skipped one: nothing of it may be delivered)."""
    expected = direct_snapshots.direct_snapshot_ids(command)
    if not expected:
        return  # target volume, a dry run, or a command of before the direct snapshots
    volumes = summary["volumes"]
    reported = [v.get("targetSnapshotId") if isinstance(v, dict) else None for v in volumes]
    if reported != expected:
        raise CompactionFailed(
            f"the Command document succeeded but its summary names the target snapshots "
            f"{reported}, not the direct snapshots start_compaction started ({expected}, in "
            "volume order): a data-plane bug; the snapshots are not delivered"
        )


def _outcome(invocation: Any, latest: CompactionProgress | None) -> CompactionResult:
    """The result of a polled invocation: not done, the summary, or CompactionFailed."""
    status = invocation.get("Status", "Pending")
    stdout = invocation.get("StandardOutputContent", "")
    if status in RUNNING_STATUSES:
        return {"done": False, "status": status, "summary": None, "progress": latest}
    if status == "Success":
        summary = _last_json_line(stdout)
        if summary is None or not isinstance(summary.get("volumes"), list):
            raise CompactionFailed(
                'the Command document succeeded but printed no {"volumes": [...]} summary '
                f"line (stdout ends with {stdout[-300:]!r}): check the command log group"
            )
        return {
            "done": True,
            "status": status,
            "summary": _valid_summary(summary),
            "progress": latest,
        }
    report = _last_json_line(stdout) or {}
    if isinstance(report.get("error"), str):
        logger.error("compaction failed", extra={"sourceVolumeId": report.get("sourceVolumeId")})
        raise CompactionFailed(report["error"])
    stderr_tail = invocation.get("StandardErrorContent", "").strip().splitlines()[-1:]
    raise CompactionFailed(
        f"the Command document ended {invocation.get('StatusDetails', status)} without an error "
        f"line{': ' + stderr_tail[0] if stderr_tail else ''}: check the command log group"
    )


def _valid_summary(summary: dict[str, Any]) -> Summary:
    """summary, typed; CompactionFailed unless the line follows
    contract/schemas/summary.schema.json: the report reads its counts, and a line of another
    shape means the program is not this stack's."""
    try:
        schemas.validate(summary, schemas.SUMMARY)
    except SchemaValidationError as error:
        raise CompactionFailed(
            "the Command document succeeded but its summary line does not follow "
            f"contract/schemas/summary.schema.json ({error.validation_message}): "
            "the program on the instance is not the one this stack ships, or a data-plane bug; "
            "nothing is delivered"
        ) from None
    return cast(Summary, summary)


def _not_done_yet(
    call: str, error: ClientError, previous: CompactionProgress | None
) -> CompactionResult:
    message = f"{call}: {aws.error_code(error)}: {aws.error_message(error)}"
    logger.info("compaction not checked yet", extra={"error": message})
    return {
        "done": False,
        "status": "Unknown",
        "summary": None,
        "progress": previous,
        "transientError": message,
    }


def _last_json_line(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            parsed = json.loads(line)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None
