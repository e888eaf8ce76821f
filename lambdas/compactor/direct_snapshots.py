"""target snapshot: the new snapshots are written directly with the EBS direct APIs.

start_compaction starts one snapshot per volume (StartSnapshot) BEFORE it sends the Command
document; the transfer instance puts the blocks and completes each (sparsecopy job --target
snapshot --target-snapshot-ids ...); check_compaction checks the job wrote exactly these
snapshots; the `Snapshots` poll loop (check_snapshots) waits for them to be completed.

Each snapshot gets what CreateSnapshot of a target volume would give it: the same description
and tags (snapshots.new_snapshot_fields), the encryption a target volume gets at launch
(ec2/launch.py block_device_mappings: the plan's targetKmsKeyId; an unencrypted volume omits
Encrypted, which StartSnapshot wants when the account encrypts by default). The ClientToken
`<execution>-a<launchAttempt>-v<index>` makes a retried call (the task's retry after a
throttled SendCommand, say) find the snapshot of the first call instead of starting a second;
a relaunch (the next launch attempt) starts new ones. Timeout (timeout_minutes): an idle timeout
(EBS cancels a snapshot, state error, when no block is written for that long or it is not
completed that long after its last block); the job copies the volumes one after the other, so
the last one's first put may come as late as the compaction budget allows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from compactor import aws, contract, kms, snapshots, tags
from compactor.config import Config
from compactor.errors import CompactionFailed, KmsKeyNotUsable
from compactor.models import CommandResult, Plan, SnapshotItem, VolumePlan

TIMEOUT_MINUTES = contract.limit("directSnapshotTimeoutMinutes")
TIMEOUT_MAX_MINUTES = contract.limit("directSnapshotTimeoutMaxMinutes")
# StartSnapshot's KmsKeyArn takes a key ARN only (botocore's model: ...:key/...), not an alias
_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]*:[0-9]{12}:key/.+$")
# StartSnapshot's limits (botocore's ebs model): the token and the description
_MAX_TOKEN = 255
_MAX_DESCRIPTION = 255
# refusals that are about the KMS key (ValidationException / AccessDeniedException Reason)
_KEY_REASONS = frozenset({"INVALID_CUSTOMER_KEY", "DEPENDENCY_ACCESS_DENIED"})
_HINTS = {
    "AccessDeniedException": (
        "the task role may call ebs:StartSnapshot only for snapshots tagged with this stack and "
        "execution (lib/task-role.ts): check the stack is up to date and no SCP or permissions "
        "boundary denies ebs:StartSnapshot"
    ),
    "ValidationException": (
        "EBS does not accept a tag, the description or the size (StartSnapshot allows tag keys "
        "of at most 127 characters, one fewer than EC2): fix the source's tags, or start again "
        'with target "volume"'
    ),
    "ServiceQuotaExceededException": (
        "an account quota of EBS is reached (at most 100 snapshots may be pending in the "
        "account; a batch keeps its own running children below it, so others are pending: "
        "other runs, another batch, docs/batch.md Limits): wait for other snapshots to finish, "
        "lower the batches' maxConcurrency, ask for a higher quota, or start again with target "
        '"volume"'
    ),
    "ConflictException": (
        "the client token was already used with other parameters: a workflow bug, start again"
    ),
}


def client_token(execution_name: str, launch_attempt: int, index: int) -> str:
    return f"{execution_name}-a{launch_attempt}-v{index}"[:_MAX_TOKEN]


def timeout_minutes(plan: Plan) -> int:
    """directSnapshotTimeoutMinutes, or the plan's compaction budget when longer (a later
    volume's snapshot gets its first block only after the earlier volumes are copied), at most
    StartSnapshot's largest Timeout."""
    poll = plan["compactionPoll"]
    budget = -(-poll["intervalSeconds"] * poll["maxAttempts"] // 60)
    return int(min(TIMEOUT_MAX_MINUTES, max(TIMEOUT_MINUTES, budget)))


def start(
    plan: Plan, launch_attempt: int, config: Config, writer_instance_arn: str
) -> list[SnapshotItem]:
    """StartSnapshot for each plan volume, in index order, tagged with the instance that writes
    it (tags.WRITER_INSTANCE: the instance role's EBS direct grant names the caller's instance)."""
    fields = snapshots.new_snapshot_fields(plan, config)
    items: list[SnapshotItem] = []
    for volume in sorted(plan["volumes"], key=lambda v: v["index"]):
        new = fields[volume["index"]]
        snapshot_tags = {**new.tags, tags.WRITER_INSTANCE: writer_instance_arn}
        request: dict[str, Any] = {
            "VolumeSize": volume["sizeGiB"],
            "Tags": [{"Key": key, "Value": value} for key, value in snapshot_tags.items()],
            "Description": new.description[:_MAX_DESCRIPTION],
            "ClientToken": client_token(plan["executionName"], launch_attempt, volume["index"]),
            "Timeout": timeout_minutes(plan),
            **encryption(volume),
        }
        try:
            answer = aws.ebs().start_snapshot(**request)
        except ClientError as error:
            if aws.is_transient(error):
                raise  # task_handler: TransientAwsError, the task's retry policy
            raise _refusal(volume, error) from error
        items.append(
            {
                "index": volume["index"],
                "snapshotId": answer["SnapshotId"],
                "sourceSnapshotId": volume["sourceSnapshotId"],
                "deviceName": volume["deviceName"],
            }
        )
    return items


def encryption(volume: VolumePlan) -> dict[str, Any]:
    """StartSnapshot's Encrypted / KmsKeyArn for a volume: what its target volume would get.
    Unencrypted: neither (EBS then applies the account's encryption by default, as it does to a
    target volume); encrypted with no key: the account's default EBS key (Encrypted alone)."""
    if not volume["encrypted"]:
        return {}
    # targetKmsKeyId: prepare's ARN of this account's key (older plans: kmsKeyId)
    key = volume.get("targetKmsKeyId", volume["kmsKeyId"])
    if not key:
        return {"Encrypted": True}
    arn = (
        key if _KEY_ARN.match(key) else kms.usable_key_arn(key, f"key of volume {volume['index']}")
    )
    return {"Encrypted": True, "KmsKeyArn": arn}


def _refusal(volume: VolumePlan, error: ClientError) -> Exception:
    code = aws.error_code(error)
    reason = str(error.response.get("Reason", ""))  # the modeled member, beside Error
    what = (
        f"StartSnapshot of the new snapshot of volume {volume['index']} "
        f"({volume['sourceSnapshotId']}) was refused: {code}"
        + (f" ({reason})" if reason else "")
        + f": {aws.error_message(error)}"
    )
    if reason in _KEY_REASONS:
        return KmsKeyNotUsable(
            f"{what}: grant the stack's roles use of the key (kmsKeyArns setting) or pass "
            "another kmsKeyId"
        )
    hint = _HINTS.get(code, 'start again, or with target "volume"')
    return CompactionFailed(f"{what}: {hint}")


def direct_snapshot_ids(command: Mapping[str, Any] | CommandResult | None) -> list[str]:
    """The snapshot ids of `$.command.directSnapshots` in index order ([] for target volume)."""
    items = (command or {}).get("directSnapshots") or []
    return [str(i["snapshotId"]) for i in sorted(items, key=lambda i: int(i["index"]))]
