"""RegisterImage as EC2 does it: moto 5.2.5 keeps only Name and Description; the workflow needs
every attribute (architecture, boot mode, block-device mappings, ...) to build an equivalent AMI."""

from __future__ import annotations

from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.amis import Ami
from moto.ec2.responses.amis import AmisResponse

from . import ami_attributes, patching

_orig: dict[str, Any] = {}

# RegisterImage parameter -> (Ami attribute, the attribute moto's DescribeImageAttribute reads)
_SCALARS = {
    "Architecture": ("architecture", None),
    "RootDeviceName": ("root_device_name", None),
    "VirtualizationType": ("virtualization_type", None),
    "BootMode": ("boot_mode", None),
    "EnaSupport": ("ena_support", None),
    "SriovNetSupport": ("sriov_net_support", "sriov"),
    "TpmSupport": ("tpm_support", "tmp"),
    "UefiData": ("uefi_data", "uefi"),
    "ImdsSupport": ("imds_support", "imds"),
}


def _block_device_mappings(self: Ami) -> list[dict[str, Any]]:
    mappings = getattr(self, "twin_block_device_mappings", None)
    if mappings is not None:
        return mappings  # type: ignore[no-any-return]
    return _orig["block_device_mappings"].fget(self)  # type: ignore[no-any-return]


def register_full_image(backend: Any, params: dict[str, Any]) -> Ami:
    """Register an AMI with every attribute EC2 keeps; used by the API and by the demo's setup."""
    mappings = params.get("BlockDeviceMappings") or []
    for mapping in mappings:
        ebs = mapping.get("Ebs")
        if ebs and ebs.get("SnapshotId"):
            snapshot = backend.snapshots.get(ebs["SnapshotId"])
            if snapshot is None:
                raise EC2ClientError(
                    "InvalidSnapshot.NotFound",
                    f"The snapshot '{ebs['SnapshotId']}' does not exist.",
                )
            if snapshot.status != "completed":
                raise EC2ClientError(
                    "IncorrectState", f"Snapshot {snapshot.id} is in state {snapshot.status}"
                )
            ebs.setdefault("VolumeSize", snapshot.volume.size)
            ebs.setdefault("Encrypted", snapshot.encrypted)
    image = backend.register_image(params.get("Name"), params.get("Description", ""))
    image.architecture = params.get("Architecture", "i386")  # EC2's default, a known trap
    image.root_device_type = "ebs"
    for key, (attr, alias) in _SCALARS.items():
        if key in params and key != "Architecture":
            setattr(image, attr, params[key])
            if alias:
                setattr(image, alias, params[key])
    image.twin_block_device_mappings = mappings
    return image


def _register_image(self: AmisResponse) -> ActionResult:
    self.error_on_dryrun()
    params: dict[str, Any] = {
        key: self._get_param(key)
        for key in ("Name", "Description", "BlockDeviceMappings", *_SCALARS)
        if self._get_param(key) is not None
    }
    for key in ("EnaSupport",):
        if key in params:
            params[key] = str(params[key]).lower() == "true"
    image = register_full_image(self.ec2_backend, params)
    ami_attributes.mark_pending(image)  # EC2: pending for a moment, then available
    tags = self._parse_tag_specification().get("image", {})
    image.add_tags(tags)
    return ActionResult({"ImageId": image.id})


def install() -> None:
    # moto's DescribeImageAttribute reads these names; an AMI without the attribute answers
    # with an empty value, as EC2 does, instead of a server error.
    for attr in ("uefi", "tmp", "imds", "lld", "ramdisk"):
        if not hasattr(Ami, attr):
            setattr(Ami, attr, None)
    patching.install(
        _orig,
        {
            "block_device_mappings": (
                Ami,
                "block_device_mappings",
                property(_block_device_mappings),
            ),
            "register_image": (AmisResponse, "register_image", _register_image),
        },
    )
    ami_attributes.install()
