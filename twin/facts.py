"""What exists at the end of a twin run, read from the emulator's model (tag-filtered Describe*
calls lag on purpose: the checks must not): the new snapshots and image, whether the run
delivered, what leaked, and the emulator's counters of what it served."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .emulator.ec2_twin import boot_disk
from .emulator.s3_twin import objects_left
from .emulator.server import Emulator
from .execution import ExecutionResult

EXECUTION_TAG = "ebs-snapshot-compactor:execution"
DELIVERED_TAG = "ebs-snapshot-compactor:delivered"
DELIVERED_STATE = "Delivered"
OBJECT_LEAK = "object "  # how a leaked S3 object is named in `leaks`


@dataclass
class Facts:
    """What one execution left: its outputs, the snapshots and image it made, what leaked."""

    outputs: list[dict[str, Any]]
    new_snapshot_ids: list[str]
    existing: list[str]
    delivered: bool
    new_image_id: str | None
    new_image_existing: bool
    leaks: list[str]
    outcome: str | None
    snapshots_created: int = 0  # CreateSnapshot calls of the run (the emulator's count)
    estimate: dict[str, Any] | None = None  # a dry run's `estimate` from the workflow report
    # what the run delivered: its output's snapshots and every snapshot ever tagged delivered
    delivered_ids: list[str] = field(default_factory=list)


@dataclass
class Counts:
    """What the emulator served during the run (its harsh answers included)."""

    instances_launched: int
    throttled_requests: dict[str, int]
    spot_capacity_errors: int
    harsh: dict[str, int]
    transfer_instances: list[dict[str, Any]]
    direct_writes: dict[str, int]


@dataclass
class Run:
    """What a scenario's run did: its execution (None for the bad-input cases, which run one
    execution each), its cleanup path, and what exists at the end."""

    result: ExecutionResult | None
    cases: list[dict[str, Any]]
    cleanup: list[dict[str, Any]]
    facts: Facts | None
    leaks: list[str]
    source_chunks: dict[str, int]
    counts: Counts

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The volumes of the execution's output (none unless it SUCCEEDED)."""
        return self.facts.outputs if self.facts else []


def tags(emu: Emulator, resource_id: str) -> dict[str, str]:
    return dict(emu.ec2.tags.get(resource_id, {}))


def leaks(emu: Emulator, name: str, keep_snapshots: set[str], keep_image: str | None) -> list[str]:
    """What is left that should not be, read from the emulator's model."""
    ec2 = emu.ec2
    out = []
    for reservation in ec2.all_reservations():
        for inst in reservation.instances:
            if inst.state != "terminated":
                out.append(f"instance {inst.id} ({inst.state})")
    # The workflow is the only creator of volumes here: every volume left over is a leak.
    out += [f"volume {vid}" for vid in ec2.volumes]
    for sid in emu.state.snapshots_created:
        mine = tags(emu, sid).get(EXECUTION_TAG, name) == name
        if sid in ec2.snapshots and sid not in keep_snapshots and mine:
            out.append(f"snapshot {sid}")
    for image_id in emu.state.images_created:
        mine = bool(tags(emu, image_id).get(EXECUTION_TAG))
        if image_id in ec2.amis and image_id != keep_image and mine:
            out.append(f"image {image_id}")
    out += [f"loop device {dev}" for dev in emu.state.loops.attached]
    # Objects in the stack's buckets (the source-blocks lists): teardown deletes an execution's
    # objects on every path, so after the run (and its cleanup path) none may be left.
    out += [f"{OBJECT_LEAK}{url}" for url in objects_left(emu.account)]
    # Also what the kernel still holds, e.g. a device a killed program stacked on a volume.
    out += [
        f"kernel loop device {dev}"
        for dev in emu.state.loops.kernel_leftovers(emu.state.workdir)
        if dev not in emu.state.loops.attached
    ]
    return out


def _outputs(result: ExecutionResult) -> tuple[list[dict[str, Any]], str | None]:
    report = result.output if result.status == "SUCCEEDED" else None
    if not isinstance(report, dict):
        return [], None
    return list(report.get("volumes") or []), report.get("imageId")


def facts(emu: Emulator, result: ExecutionResult, source_image: str | None) -> Facts:
    outputs, reported_image = _outputs(result)
    new_ids = list(emu.state.snapshots_created)
    for v in outputs:
        if v.get("newSnapshotId") and v["newSnapshotId"] not in new_ids:
            new_ids.append(v["newSnapshotId"])
    existing = [sid for sid in new_ids if sid in emu.ec2.snapshots]
    tagged_delivered = {sid for sid in existing if tags(emu, sid).get(DELIVERED_TAG) == "true"}
    delivered = DELIVERED_STATE in result.states_visited or bool(tagged_delivered)
    images = [i for i in emu.state.images_created if i != source_image]
    new_image = reported_image or (images[-1] if images else None)
    image_existing = new_image is not None and new_image in emu.ec2.amis
    ever = {
        sid for sid in new_ids
        if emu.state.snapshot_tags_put.get(sid, {}).get(DELIVERED_TAG) == "true"
    }  # fmt: skip
    output_ids = {v["newSnapshotId"] for v in outputs if v.get("newSnapshotId")}
    keep = output_ids | tagged_delivered
    if delivered:
        # a direct snapshot never delivered is an abandoned attempt's (failed, instance lost)
        keep |= {s for s in existing if s not in emu.state.direct.started or s in ever}
    keep_image = new_image if (delivered or reported_image) else None
    left = leaks(emu, result.name, keep, keep_image)
    report = result.output if isinstance(result.output, dict) else result.workflow_report
    estimate = report.get("estimate") if isinstance(report, dict) else None
    return Facts(
        outputs, new_ids, existing, delivered, new_image, image_existing, left, outcome(result),
        len(emu.state.snapshots_created), estimate if isinstance(estimate, dict) else None,
        sorted(output_ids | ever),
    )  # fmt: skip


def outcome(result: ExecutionResult) -> str | None:
    for candidate in (result.output, result.workflow_report):
        if isinstance(candidate, dict) and candidate.get("outcome"):
            return str(candidate["outcome"])
    return None


def counts(emu: Emulator) -> Counts:
    state = emu.state
    return Counts(
        instances_launched=len(state.instances_launched),
        throttled_requests=dict(state.throttled_served),
        spot_capacity_errors=state.spot_failures_served,
        harsh={
            "tag_filtered_answers_lagging": state.tag_lag_hidden,
            "snapshot_in_use_answers": state.snapshot_in_use_served,
        },
        transfer_instances=transfer_instances(emu),
        direct_writes=direct_writes(emu),
    )


def direct_writes(emu: Emulator) -> dict[str, int]:
    """The EBS direct writes the emulator served (ebs_direct.py) and the faults' answers."""
    direct = emu.state.direct
    return {
        "snapshots_started": len(direct.started),
        "puts_accepted": direct.puts_accepted,
        "puts_throttled": direct.puts_throttled,
        "puts_concurrent_limit": direct.concurrent_limit_served,
        "puts_corrupted": direct.puts_corrupted,
        "pending_deletes_refused": direct.deletes_refused,
        # AWS's behaviours met (Faults.ebs_*, harsh by default): the sweep's summary counts them
        "not_found_after_start": direct.not_found_served,
        "not_found_while_sealing": direct.seal_not_found_served,
        "transient_put_failures": direct.transient_served,
        "completion_answers_lost": direct.completions_lost,
        "puts_over_quota": direct.puts_over_quota,
        # FAULT=credentials-near-expiry (instance_metadata.py): role credential sets the instances
        # fetched (each with faults.CREDENTIALS_SECONDS left), requests refused for an expired token
        "role_credentials_issued": emu.state.credentials_issued,
        "expired_tokens_refused": emu.state.expired_tokens_refused,
    }


def transfer_instances(emu: Emulator) -> list[dict[str, Any]]:
    """Which disk each transfer instance booted from (emulator/boot.py): its own root, or a
    volume present at launch that carries its AMI's root filesystem UUID."""
    out = []
    for reservation in emu.ec2.all_reservations():
        for instance in reservation.instances:
            disk = boot_disk(instance)
            out.append(
                {
                    "instanceId": instance.id,
                    "bootedFrom": "own root volume" if disk is None else disk.volume_id,
                }
            )
    return out
