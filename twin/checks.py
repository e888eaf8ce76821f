"""The checks of a twin run: each new snapshot's files and fsck, on every restore a user can make
of it (encrypted, and unencrypted when the snapshot is), against its source disk; its blocks
against the source's held blocks and the blocks its files need (and the block picture of both);
the source unchanged, the new AMI's attributes and fast snapshot restores, every AWS call of the
Lambdas against the synthesized roles, with OS=debian the boot of both AMIs' root volumes
(twin/boot_proof.py); and `holds`, the invariants every case must keep."""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from devkit.restore import replay_written

from . import boot_proof
from .context import Context
from .emulator.blockstore import EBS_BLOCK, written_chunks
from .emulator.server import Emulator
from .facts import Run
from .iam.check import check_calls
from .needed import check_blocks, file_data_chunks
from .recording import verify_blocks
from .restores import restored, restores_for
from .source import Source, fingerprints
from .verify import reference, verify

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
    boots: dict[str, dict[str, Any]]  # OS=debian: "new" (and "source" when it failed) -> facts


def check(ctx: Context, run: Run) -> Checks:
    source = ctx.registered
    unchanged = fingerprints(ctx.emu, source) == source.fingerprints
    verification, new_chunks_total, panels = _verification(ctx, run)
    image = _ami_check(ctx.emu, source, run.facts.new_image_id if run.facts else None)
    # every call the Lambdas made, checked against the synthesized roles (conditions included)
    calls = check_calls(ctx.emu.calls_path, ctx.d, usage_from=run_label(ctx))
    denials = [str(denial) for denial in calls]
    boots = _boots(ctx, run.facts.new_image_id if run.facts else None)
    return Checks(verification, new_chunks_total, panels, unchanged, image, denials, boots)


def run_label(ctx: Context) -> str:
    """The run in the IAM usage report: the test that ran it (pytest sets PYTEST_CURRENT_TEST)
    and what it ran."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0] or "twin"
    o = ctx.opts
    return f"{test} (input={o.input} trigger={o.trigger} fault={o.fault or 'none'})"


def _boots(ctx: Context, new_image_id: str | None) -> dict[str, dict[str, Any]]:
    """OS=debian: boot the new AMI (when the run registered one that still exists) in QEMU
    through its own bootloader; the source AMI too, but only when the new one did not boot: then
    the source's boot tells a broken copy from a broken set-up (each TCG boot costs a core for
    ~20 s, and a source that boots proves nothing about the copy)."""
    source = ctx.registered
    if ctx.opts.os == "none" or source.image_id is None:
        return {}
    boots: dict[str, dict[str, Any]] = {}
    if new_image_id is not None and new_image_id in ctx.emu.ec2.amis:
        boots = boot_proof.boot_images(ctx.emu, {"new": new_image_id}, ctx.logdir)
    if not boots or not all(boot["boots"] for boot in boots.values()):
        boots |= boot_proof.boot_images(ctx.emu, {"source": source.image_id}, ctx.logdir)
    return boots


def _verification(ctx: Context, run: Run) -> tuple[list[dict[str, Any]], int, list[Panel]]:
    """Per source snapshot and its new snapshot: the block rule (needed.check_blocks) and the
    files and fsck on each restore a user can make of the new snapshot (twin/restores.py)."""
    emu, source = ctx.emu, ctx.registered
    verification = []
    new_chunks_total = 0
    panels: list[Panel] = []
    for index, sid in enumerate(source.snapshot_ids):
        held = written_chunks(emu.snapshot_file(sid))
        total = emu.snapshot_file(sid).stat().st_size // EBS_BLOCK
        panels.append((f"before: {sid} ({run.source_chunks[sid]} blocks)", held, total))
        match = [v for v in run.outputs if v.get("sourceSnapshotId") == sid]
        new_id = match[0].get("newSnapshotId") if match else None
        if new_id and new_id in emu.state.snapshot_files:
            chunks = written_chunks(emu.snapshot_file(new_id))
            new_chunks_total += len(chunks)
            panels.append((f"after: {new_id} ({len(chunks)} blocks)", chunks, total))
            if ctx.opts.diskless:  # no filesystems: the replayed blocks against the source's
                blocks = verify_blocks(source.disks[index].path, emu.snapshot_file(new_id))
                verification.append({"sourceSnapshotId": sid, "newSnapshotId": new_id, **blocks})
                continue
            work = ctx.work / f"verify-{index}"
            try:
                ref = reference(source.disks[index], work / "reference.img")
                row = _restores_checked(ctx, source.disks[index], ref, held, new_id)
                replayed = replay_written(emu.snapshot_file(sid), source.disks[index].partitions,
                                          work / "replayed.img", sid)  # fmt: skip
                row["blocks"] = check_blocks(held, chunks, file_data_chunks(ref), replayed)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            verification.append({"sourceSnapshotId": sid, "newSnapshotId": new_id, **row})
    return verification, new_chunks_total, panels


def _restores_checked(
    ctx: Context, disk: Any, ref: Any, held: set[int], new_id: str
) -> dict[str, Any]:
    """verify() on every restore of the new snapshot; the row's totals hold only if every
    restore holds (its problems are prefixed with the restore)."""
    restores = []
    for way in restores_for(ctx.emu, new_id):
        with restored(ctx.emu, new_id, way) as volume:
            checked = verify(disk, ref, held, volume.path)
        restores.append({**volume.facts(), **asdict(checked)})
    return {
        "restores": restores,
        "files_checked": min(r["files_checked"] for r in restores),
        "files_verified": all(r["files_verified"] for r in restores),
        "fsck_clean": all(r["fsck_clean"] for r in restores),
        "problems": [f"{r['restore']} restore: {p}" for r in restores for p in r["problems"]],
    }


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
    """The invariants of every case hold: broken_invariants() names none."""
    return not broken_invariants(row)


def broken_invariants(row: dict[str, Any]) -> list[str]:
    """The invariants of every case that the run broke, each named so that a failed test says
    which: nothing leaked, every AWS call allowed by the synthesized roles, the source untouched,
    every new snapshot checked exact (exact()), and once delivered the snapshots it delivered and
    the AMI, if one was registered, still exist; with OS=debian a new AMI that was booted booted;
    a dry run created no snapshot and no AMI."""
    broken = []
    if row["leaked_resources"]:
        broken.append(f"leaked: {row['leaked_resources']}")
    if row.get("iam_denials"):
        broken.append(f"denied by IAM: {row['iam_denials']}")
    if row.get("new_image_boots") is False:
        failed = [boot for role, boot in (row.get("boot_proof") or {}).items()
                  if role.startswith("new") and not boot.get("boots")]  # fmt: skip
        broken += [f"the new AMI did not boot: {_why_not(b)}" for b in failed] or [
            "the new AMI did not boot"
        ]
    if not row["source_snapshot_unchanged"]:
        broken.append("the source snapshot changed")
    if row.get("dry_run") and (row.get("snapshots_created") or row.get("new_image_id")):
        broken.append("a dry run created a snapshot or an AMI")
    broken += [f"not exact: {v}" for v in row.get("verification") or [] if not _exact_one(v)]
    if row["delivered"]:
        # every snapshot it delivered (its output's, every one ever tagged delivered) exists
        delivered = row.get("delivered_snapshot_ids") or []
        existing = set(row.get("new_snapshot_ids_existing") or [])
        if not delivered or any(sid not in existing for sid in delivered):
            broken.append(f"delivered {delivered}, of which exist {sorted(existing)}")
        if row.get("new_image_id") and not row["new_image_existing"]:
            broken.append(f"the delivered AMI {row['new_image_id']} does not exist")
    return broken


def _why_not(boot: dict[str, Any]) -> str:
    """A failed boot in a line: its dead end or timeout, when, and the console's last line."""
    end = "timed out" if boot.get("timed_out") else boot.get("fatal") or boot.get("marker")
    tail = (boot.get("console_tail") or ["(no console output)"])[-1]
    return f"{end} after {boot.get('seconds')} s, milestones {boot.get('milestones')}, last: {tail}"


def exact(row: dict[str, Any]) -> bool:
    """Every new snapshot the run checked keeps the block rule (none beyond the source's held
    blocks, every held block a file needs) and, on every restore, its files and fsck."""
    return all(_exact_one(v) for v in row.get("verification") or [])


def _exact_one(verification: dict[str, Any]) -> bool:
    blocks = verification.get("blocks") or {}
    return bool(
        blocks.get("holds", True) and verification["files_verified"] and verification["fsck_clean"]
    )
