"""The source of a twin scenario: a dirty disk registered as a snapshot (INPUT=snapshot) or a
golden image of two disks (INPUT=ami; with OS=debian its root is a real Debian disk), and the
fingerprints that tell whether the workflow changed it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import boot_proof, disks
from .emulator import boot
from .emulator.server import Emulator
from .options import Options

SOURCE_TAGS = {"Name": "twin-demo", "team": "storage"}
AMI_ATTRIBUTES = {
    "Description": "twin demo image: GPT/EFI/ext4 root and an ext4 data volume",
    "Architecture": "x86_64",
    "RootDeviceName": "/dev/xvda",
    "VirtualizationType": "hvm",
    "BootMode": "uefi-preferred",
    "EnaSupport": True,
    "SriovNetSupport": "simple",
    "TpmSupport": "v2.0",
    "ImdsSupport": "v2.0",
}


@dataclass
class Source:
    kind: str
    snapshot_ids: list[str]
    disks: list[Any]
    image_id: str | None = None
    fingerprints: dict[str, str | None] = field(default_factory=dict)


def source_key(emu: Emulator, opts: Options) -> str | None:
    """ENCRYPTED (the default): a customer managed KMS key of the account for the source
    snapshots (its default key policy lets the account use it); None: unencrypted sources."""
    if not opts.encrypted:
        return None
    kms = emu.boto3_client("kms")
    return str(
        kms.create_key(Description="twin demo: the source snapshots' key")["KeyMetadata"]["Arn"]
    )


def register(emu: Emulator, opts: Options, work: Path) -> Source:
    if opts.diskless:
        from .recording import register_sources

        sids, images, image_id = register_sources(emu, opts, work)
        return Source("image" if image_id else "snapshot", sids, images, image_id=image_id)
    key = source_key(emu, opts)
    if opts.input == "snapshot":
        disk = disks.build(opts.fs, work / "source.img", opts.seed)
        # The tag trigger fires on a snapshot still being taken (tag at creation, DLM, Backup).
        pending = opts.trigger == "tag"
        sid = emu.register_snapshot(
            disk.path, "twin demo: a dirty disk", dict(SOURCE_TAGS),
            state="pending" if pending else "completed", completes=True, kms_key_id=key,
        )  # fmt: skip
        return Source("snapshot", [sid], [disk])
    if opts.os == "debian":
        root = boot_proof.build_root(work)
    else:
        # A golden image built from the same AL2023 release as the transfer AMI: its root
        # filesystem has the transfer AMI's root UUID (emulator/boot.py), so a transfer instance
        # launched with it mapped boots from it.
        base_uuid = boot.AL2023_ROOT_UUID if opts.fs in ("ext4", "xfs") else None
        root = disks.build(opts.fs, work / "root.img", opts.seed, root_uuid=base_uuid)
    data = disks.build("bare-ext4", work / "data.img", opts.seed + 10)
    image_id, sids = emu.register_ami(
        "twin-demo-image", [("/dev/xvda", root.path), ("/dev/sdb", data.path)],
        ami_attributes(opts), kms_key_id=key,
    )  # fmt: skip
    emu.boto3_client("ec2").create_tags(
        Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in SOURCE_TAGS.items()]
    )
    return Source("image", sids, [root, data], image_id=image_id)


def ami_attributes(opts: Options) -> dict[str, Any]:
    """The source AMI's attributes; with OS=debian its BootMode is BOOT_MODE's (legacy-bios by
    default), and NitroTPM (TpmSupport) only with uefi, as EC2 requires."""
    if opts.os == "none":
        return dict(AMI_ATTRIBUTES)
    attributes = {
        **AMI_ATTRIBUTES,
        "Description": "twin demo image: a Debian bookworm root (GRUB for BIOS and UEFI) and an "
        "ext4 data volume",
        "BootMode": opts.ami_boot_mode,
    }
    if opts.ami_boot_mode != "uefi":
        attributes.pop("TpmSupport")
    return attributes


def fingerprints(emu: Emulator, source: Source) -> dict[str, str | None]:
    """Data, size, description, encryption and tags of each source snapshot, read from the
    emulator's model (not the API: a Describe would advance pending snapshots). The state is left
    out: a pending source completing is AWS's doing, not the workflow's."""
    out: dict[str, str | None] = {}
    for sid in source.snapshot_ids:
        snap = emu.ec2.snapshots.get(sid)
        meta = (
            None
            if snap is None
            else {
                "VolumeSize": snap.volume.size,
                "Description": snap.description,
                "Encrypted": snap.encrypted,
                "Tags": sorted(emu.ec2.tags.get(sid, {}).items()),
            }
        )
        out[sid] = f"{emu.snapshot_fingerprint(sid)}|{json.dumps(meta, sort_keys=True)}"
    return out
