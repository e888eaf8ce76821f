"""Source AMIs (read only): what RegisterImage needs for an equivalent AMI, and registering it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.config import Config
from compactor.errors import ImageNotFound, ImageRegistrationFailed, UnsupportedImage
from compactor.models import DeviceMapping, EbsMapping, ImageResult, ImageSpec, Plan, SnapshotItem

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import (
        BlockDeviceMappingTypeDef,
        ImageTypeDef,
        RegisterImageRequestTypeDef,
    )

IMAGE_NAME_MAX = 128
_NOT_IN_IMAGE_NAME = re.compile(r"[^a-zA-Z0-9()\[\] ./'@_-]")
_LINUX_USAGE_OPERATION = "RunInstances"


def describe_source(image_id: str) -> ImageTypeDef:
    try:
        found = aws.ec2().describe_images(ImageIds=[image_id])["Images"]
    except ClientError as error:
        if aws.error_code(error) not in ("InvalidAMIID.NotFound", "InvalidAMIID.Unavailable"):
            raise
        found = []
    if not found:
        raise ImageNotFound(
            f"AMI {image_id} not found in {aws.region()}: check the id, or copy the AMI to this "
            "Region (or share it with this account)"
        )
    image = found[0]
    if image.get("State") != "available":
        raise UnsupportedImage(
            f"AMI {image_id} is {image.get('State')}, not available: wait for it or pick another"
        )
    if image.get("RootDeviceType") != "ebs":
        raise UnsupportedImage(
            f"AMI {image_id} has an instance-store root device: only EBS-backed AMIs can be "
            "compacted"
        )
    check_billing(image)
    return image


def check_billing(image: ImageTypeDef) -> None:
    """Refuse an AMI whose billing or licensing RegisterImage cannot carry over.

    RegisterImage takes an AMI's billing information (PlatformDetails, UsageOperation, product
    codes) from the root snapshot, and a snapshot of a never-written target volume has none: the
    compacted copy of a Windows, RHEL, SUSE, SQL Server or Marketplace AMI would register as
    Linux/UNIX (UsageOperation RunInstances), lose its license and product codes, and not boot
    or not be billed as the software requires. Decided here, before anything is created."""
    image_id = image["ImageId"]
    usage = image.get("UsageOperation")
    codes = [p["ProductCodeId"] for p in image.get("ProductCodes", []) if "ProductCodeId" in p]
    reasons: list[str] = []
    if image.get("Platform") == "windows":
        reasons.append("it is a Windows AMI (Platform windows)")
    if usage and usage != _LINUX_USAGE_OPERATION:
        reasons.append(
            f"it bills as {image.get('PlatformDetails') or 'a paid platform'} "
            f"(UsageOperation {usage}, not {_LINUX_USAGE_OPERATION})"
        )
    if codes:
        reasons.append(f"it carries product codes {', '.join(codes)}")
    if reasons:
        raise UnsupportedImage(
            f"AMI {image_id} cannot be compacted into a new AMI: {'; '.join(reasons)}. "
            "RegisterImage takes billing and licensing information from the snapshot, and the "
            "compacted copy is a new volume that has none, so the new AMI would register as "
            "Linux/UNIX and lose it. Compact its data volumes as snapshots instead (start the "
            "workflow with snapshotId for each), and keep launching from the original AMI"
        )


def uefi_data(image_id: str) -> str | None:
    try:
        value = aws.ec2().describe_image_attribute(ImageId=image_id, Attribute="uefiData")
    except ClientError as error:
        # AMIs without UEFI variables answer with an error on some Regions/partitions
        if aws.error_code(error) in ("InvalidParameter", "InvalidRequest", "UnsupportedOperation"):
            return None
        raise
    data = value.get("UefiData", {}).get("Value")
    return data or None


def capture(image: ImageTypeDef, uefi: str | None, trigger_tag_key: str) -> ImageSpec:
    """Every attribute RegisterImage accepts, as the source AMI has it."""
    return {
        "imageId": image["ImageId"],
        "name": image.get("Name", image["ImageId"]),
        "description": image.get("Description"),
        # RegisterImage defaults to i386 when Architecture is missing: always carry it
        "architecture": image.get("Architecture", "x86_64"),
        "rootDeviceName": image.get("RootDeviceName", "/dev/xvda"),
        "virtualizationType": image.get("VirtualizationType"),
        "bootMode": image.get("BootMode"),
        "enaSupport": image.get("EnaSupport"),
        "sriovNetSupport": image.get("SriovNetSupport"),
        "tpmSupport": image.get("TpmSupport"),
        "uefiData": uefi,
        "imdsSupport": image.get("ImdsSupport"),
        "kernelId": image.get("KernelId"),
        "ramdiskId": image.get("RamdiskId"),
        "blockDeviceMappings": [_mapping(m) for m in image.get("BlockDeviceMappings", [])],
        "tags": tags.copyable(tags.from_aws(image.get("Tags")), trigger_tag_key),
        "platformDetails": image.get("PlatformDetails"),
        "usageOperation": image.get("UsageOperation"),
        "productCodes": [p["ProductCodeId"] for p in image.get("ProductCodes", [])],
        "deprecationTime": image.get("DeprecationTime"),
    }


def _mapping(source: BlockDeviceMappingTypeDef) -> DeviceMapping:
    mapping: DeviceMapping = {"deviceName": source["DeviceName"]}
    if "VirtualName" in source:
        mapping["virtualName"] = source["VirtualName"]
    if "NoDevice" in source:
        mapping["noDevice"] = source["NoDevice"]
    ebs = source.get("Ebs")
    if ebs is not None:
        copied: EbsMapping = {}
        for ours, theirs in (
            ("snapshotId", "SnapshotId"),
            ("volumeSize", "VolumeSize"),
            ("volumeType", "VolumeType"),
            ("iops", "Iops"),
            ("throughput", "Throughput"),
            ("deleteOnTermination", "DeleteOnTermination"),
            ("encrypted", "Encrypted"),
            ("kmsKeyId", "KmsKeyId"),
        ):
            if theirs in ebs:
                copied[ours] = ebs[theirs]  # type: ignore[literal-required]
        mapping["ebs"] = copied
    return mapping


def snapshot_mappings(spec: ImageSpec) -> list[tuple[str, str]]:
    """(device name, snapshot id) of each EBS volume of the AMI that comes from a snapshot."""
    return [
        (m["deviceName"], m["ebs"]["snapshotId"])
        for m in spec["blockDeviceMappings"]
        if "ebs" in m and "snapshotId" in m["ebs"]
    ]


def default_name(source_name: str, execution_name: str) -> str:
    name = _NOT_IN_IMAGE_NAME.sub("-", f"{source_name}-compact-{execution_name}")
    return name[:IMAGE_NAME_MAX]


def owned_image_named(name: str) -> Mapping[str, Any] | None:
    found = aws.ec2().describe_images(
        Owners=["self"], Filters=[{"Name": "name", "Values": [name]}]
    )["Images"]
    return found[0] if found else None


def warnings(spec: ImageSpec, copy_sharing: bool = False) -> list[str]:
    """What RegisterImage cannot carry over from the source AMI (with copySharing,
    compactor/sharing.py sets the deprecation time)."""
    # paid, Windows and product-code AMIs are refused by prepare (check_billing)
    result: list[str] = []
    if spec["deprecationTime"] and not copy_sharing:
        result.append(
            f"the source AMI is deprecated at {spec['deprecationTime']}; the new AMI is not "
            "(EnableImageDeprecation sets it)"
        )
    return result


def register(plan: Plan, snapshots: Sequence[SnapshotItem], config: Config) -> ImageResult:
    spec = plan["image"]
    name = plan["imageName"]
    if spec is None or name is None:
        return {"imageId": None, "warnings": []}
    existing = owned_image_named(name)
    if existing is not None:
        existing_tags = tags.from_aws(existing.get("Tags"))
        if tags.is_owned(existing_tags, config.stack_name, plan["executionName"]):
            # a retried call: the AMI was registered by this execution already
            return {
                "imageId": existing["ImageId"],
                "warnings": warnings(spec, plan.get("copySharing", False)),
            }
        raise ImageRegistrationFailed(
            f"an AMI named {name!r} already exists ({existing['ImageId']}): pass another imageName"
        )
    request = registration_request(plan, spec, name, snapshots, config)
    try:
        image_id = aws.ec2().register_image(**request)["ImageId"]
    except ClientError as error:
        raise ImageRegistrationFailed(
            f"RegisterImage failed for {name!r}: {aws.error_code(error)}: "
            f"{aws.error_message(error)}"
        ) from error
    return {"imageId": image_id, "warnings": warnings(spec, plan.get("copySharing", False))}


def registration_request(
    plan: Plan, spec: ImageSpec, name: str, snapshots: Sequence[SnapshotItem], config: Config
) -> RegisterImageRequestTypeDef:
    new_by_device = {s["deviceName"]: s["snapshotId"] for s in snapshots}
    image_tags = dict(spec["tags"])
    image_tags.update(plan["tags"])
    image_tags.update(tags.ownership(config.stack_name, plan["executionName"], tags.ROLE_IMAGE))
    image_tags[tags.SOURCE_IMAGE] = spec["imageId"]
    # delivered from birth: it is registered on delivered snapshots, and kept whatever follows
    image_tags[tags.DELIVERED] = tags.DELIVERED_VALUE
    request: RegisterImageRequestTypeDef = {
        "Name": name,
        "Architecture": spec["architecture"],  # type: ignore[typeddict-item]
        "RootDeviceName": spec["rootDeviceName"],
        "BlockDeviceMappings": [
            _registration_mapping(m, new_by_device) for m in spec["blockDeviceMappings"]
        ],
        "TagSpecifications": [tags.specification("image", image_tags)],
    }
    optional: dict[str, Any] = {
        "Description": spec["description"],
        "VirtualizationType": spec["virtualizationType"],
        "BootMode": spec["bootMode"],
        "EnaSupport": spec["enaSupport"],
        "SriovNetSupport": spec["sriovNetSupport"],
        "TpmSupport": spec["tpmSupport"],
        "UefiData": spec["uefiData"],
        "ImdsSupport": spec["imdsSupport"],
        "KernelId": spec["kernelId"],
        "RamdiskId": spec["ramdiskId"],
    }
    request.update({k: v for k, v in optional.items() if v is not None})  # type: ignore[typeddict-item]
    return request


def _registration_mapping(
    mapping: DeviceMapping, new_by_device: Mapping[str | None, str]
) -> BlockDeviceMappingTypeDef:
    result: BlockDeviceMappingTypeDef = {"DeviceName": mapping["deviceName"]}
    if "virtualName" in mapping:
        result["VirtualName"] = mapping["virtualName"]
    if "noDevice" in mapping:
        result["NoDevice"] = mapping["noDevice"]
    ebs = mapping.get("ebs")
    if ebs is not None:
        if "snapshotId" in ebs:
            # the compacted copy; its encryption comes with the snapshot, so Encrypted/KmsKeyId
            # are not passed (RegisterImage rejects a key for a snapshot-backed mapping)
            snapshot_id = new_by_device[mapping["deviceName"]]
            result["Ebs"] = {"SnapshotId": snapshot_id}
        else:
            result["Ebs"] = {}
            if "encrypted" in ebs:
                result["Ebs"]["Encrypted"] = ebs["encrypted"]
            if "kmsKeyId" in ebs:
                result["Ebs"]["KmsKeyId"] = ebs["kmsKeyId"]
        for ours, theirs in (
            ("volumeSize", "VolumeSize"),
            ("volumeType", "VolumeType"),
            ("iops", "Iops"),
            ("throughput", "Throughput"),
            ("deleteOnTermination", "DeleteOnTermination"),
        ):
            if ours in ebs:
                result["Ebs"][theirs] = ebs[ours]  # type: ignore[literal-required]
    return result
