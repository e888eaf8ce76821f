"""The checks of a twin run: each new snapshot's files and fsck against its source disk (and the
block picture of both), the source unchanged, the new AMI's attributes and fast snapshot
restores, every AWS call of the Lambdas against the synthesized roles, with OS=debian the boot of
both AMIs' root volumes (twin/boot_proof.py); and `holds`, the invariants every case must keep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import boot_proof
from .context import Context
from .emulator.blockstore import EBS_BLOCK, written_chunks
from .emulator.server import Emulator
from .facts import Run
from .iam.check import check_calls
from .recording import verify_blocks
from .source import Source, fingerprints
from .verify import verify

Panel = tuple[str, set[int], int]
# The attributes a registered AMI must keep from its source image.
AMI_KEYS = (
    "Architecture", "RootDeviceName", "VirtualizationType", "BootMode",
    "EnaSupport", "SriovNetSupport", "TpmSupport", "ImdsSupport",
)  # fmt: skip


@dataclass
class Checks:
    verification: list[dict[str, Any]]
    new_chunks_total: int
    panels: list[Panel]
    source_unchanged: bool
    image: dict[str, Any]
    iam_denials: list[str]
    boots: dict[str, dict[str, Any]]  # OS=debian: {"new", "source"} -> the boot's facts


def check(ctx: Context, run: Run) -> Checks:
    source = ctx.registered
    unchanged = fingerprints(ctx.emu, source) == source.fingerprints
    verification, new_chunks_total, panels = _verification(ctx, run)
    image = _ami_check(ctx.emu, source, run.facts.new_image_id if run.facts else None)
    # every call the Lambdas made, checked against the synthesized roles (conditions included)
    denials = [str(denial) for denial in check_calls(ctx.emu.calls_path, ctx.d)]
    boots = _boots(ctx, run.facts.new_image_id if run.facts else None)
    return Checks(verification, new_chunks_total, panels, unchanged, image, denials, boots)


def _boots(ctx: Context, new_image_id: str | None) -> dict[str, dict[str, Any]]:
    """OS=debian: boot the new AMI (when the run registered one that still exists) and the
    source AMI in QEMU through their own bootloaders."""
    source = ctx.registered
    if ctx.opts.os == "none" or source.image_id is None:
        return {}
    images = {"source": source.image_id}
    if new_image_id is not None and new_image_id in ctx.emu.ec2.amis:
        images = {"new": new_image_id, **images}
    return boot_proof.boot_images(ctx.emu, images, ctx.logdir)


def _verification(ctx: Context, run: Run) -> tuple[list[dict[str, Any]], int, list[Panel]]:
    emu, source = ctx.emu, ctx.registered
    verification = []
    new_chunks_total = 0
    panels: list[Panel] = []
    for index, sid in enumerate(source.snapshot_ids):
        total = emu.snapshot_file(sid).stat().st_size // EBS_BLOCK
        panels.append((f"before: {sid} ({run.source_chunks[sid]} blocks)",
                       written_chunks(emu.snapshot_file(sid)), total))  # fmt: skip
        match = [v for v in run.outputs if v.get("sourceSnapshotId") == sid]
        new_id = match[0].get("newSnapshotId") if match else None
        if new_id and new_id in emu.state.snapshot_files:
            new_file = emu.snapshot_file(new_id)
            chunks = written_chunks(new_file)
            new_chunks_total += len(chunks)
            panels.append((f"after: {new_id} ({len(chunks)} blocks)", chunks, total))
            if ctx.opts.diskless:  # no filesystems: the replayed blocks against the source's
                blocks = verify_blocks(source.disks[index].path, new_file)
                verification.append({"sourceSnapshotId": sid, "newSnapshotId": new_id, **blocks})
                continue
            checked = verify(source.disks[index], new_file, ctx.work / f"verify-{index}")
            verification.append(
                {
                    "sourceSnapshotId": sid,
                    "newSnapshotId": new_id,
                    "files_checked": checked.files_checked,
                    "files_verified": checked.files_verified,
                    "fsck_clean": checked.fsck_clean,
                    "problems": checked.problems,
                }
            )
    return verification, new_chunks_total, panels


def _ami_check(emu: Emulator, source: Source, image_id: str | None) -> dict[str, Any]:
    if source.image_id is None:
        return {}
    ec2 = emu.boto3_client("ec2")
    check: dict[str, Any] = {"new_image_id": image_id, "attributes_equal": False, "fsr": []}
    if image_id is None or image_id not in emu.ec2.amis:
        return check
    old = ec2.describe_images(ImageIds=[source.image_id])["Images"][0]
    new = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    differ = {k: (old.get(k), new.get(k)) for k in AMI_KEYS if old.get(k) != new.get(k)}
    old_devices = sorted(m["DeviceName"] for m in old["BlockDeviceMappings"])
    new_devices = sorted(m["DeviceName"] for m in new["BlockDeviceMappings"])
    if old_devices != new_devices:
        differ["BlockDeviceMappings"] = (old_devices, new_devices)
    check["attribute_differences"] = {k: list(v) for k, v in differ.items()}
    check["attributes_equal"] = not differ
    new_snaps = [m["Ebs"]["SnapshotId"] for m in new["BlockDeviceMappings"] if "Ebs" in m]
    if new_snaps:
        fsr = ec2.describe_fast_snapshot_restores(
            Filters=[{"Name": "snapshot-id", "Values": new_snaps}]
        )["FastSnapshotRestores"]
        check["fsr"] = [
            {"snapshotId": f["SnapshotId"], "zone": f["AvailabilityZone"], "state": f["State"]}
            for f in fsr
        ]
    return check


def holds(row: dict[str, Any]) -> bool:
    """The invariants of every case: nothing leaked, every AWS call allowed by the synthesized
    roles, the source untouched, and once delivered the snapshots it delivered and the AMI, if
    one was registered, still exist; with OS=debian a new AMI
    that was booted booted; a dry run created no snapshot and no AMI."""
    if row["leaked_resources"] or row.get("iam_denials"):
        return False
    if row.get("new_image_boots") is False:
        return False
    if not row["source_snapshot_unchanged"]:
        return False
    if row.get("dry_run") and (row.get("snapshots_created") or row.get("new_image_id")):
        return False  # a dry run makes no snapshot and no AMI, whatever happened
    if row["delivered"]:
        # every snapshot it delivered (its output's, every one ever tagged delivered) exists
        delivered = row.get("delivered_snapshot_ids") or []
        existing = set(row.get("new_snapshot_ids_existing") or [])
        if not delivered or any(sid not in existing for sid in delivered):
            return False
        if row.get("new_image_id") and not row["new_image_existing"]:
            return False
    return True
