from __future__ import annotations

from typing import Any

import boto3
import pytest
from compactor import aws, errors
from compactor.handlers import create_snapshots, register_image
from conftest import (
    EXECUTION,
    REGION,
    SOURCE_IMAGE_ID,
    STACK,
    UEFI_DATA,
    World,
    ready_instance,
    serve_image,
    source_image,
)
from support import capture, error_response, respond


def compacted_image_job(
    world: World, **image_overrides: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    serve_image(source_image(world, volume_count=2, **image_overrides))
    plan, _, ready = ready_instance(world, {"imageId": SOURCE_IMAGE_ID, "tags": {"env": "prod"}})
    snapshots = create_snapshots.handler({"plan": plan, "attached": ready}, world.context)
    return plan, snapshots


def register(world: World, plan: dict[str, Any], snapshots: dict[str, Any]) -> dict[str, Any]:
    return register_image.handler({"plan": plan, "snapshots": snapshots}, world.context)


def test_registers_an_equivalent_ami_on_the_new_snapshots(world: World) -> None:
    plan, snapshots = compacted_image_job(world)
    calls = capture(aws.ec2(), "RegisterImage")
    result = register(world, plan, snapshots)
    new = {s["deviceName"]: s["snapshotId"] for s in snapshots["snapshots"]}
    (request,) = calls
    assert request == {
        "Name": f"app-server-2026.11-compact-{EXECUTION}",
        "Description": "app server, hardened",
        "Architecture": "arm64",
        "RootDeviceName": "/dev/xvda",
        "VirtualizationType": "hvm",
        "BootMode": "uefi",
        "EnaSupport": True,
        "SriovNetSupport": "simple",
        "TpmSupport": "v2.0",
        "UefiData": UEFI_DATA,
        "ImdsSupport": "v2.0",
        "BlockDeviceMappings": [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {
                    "SnapshotId": new["/dev/xvda"],
                    "VolumeSize": 8,
                    "VolumeType": "gp3",
                    "Iops": 4000,
                    "Throughput": 250,
                    "DeleteOnTermination": True,
                },
            },
            {
                "DeviceName": "/dev/xvdb",
                "Ebs": {
                    "SnapshotId": new["/dev/xvdb"],
                    "VolumeSize": 9,
                    "VolumeType": "gp2",
                    "DeleteOnTermination": False,
                },
            },
            {"DeviceName": "/dev/sdx", "VirtualName": "ephemeral0"},
            {"DeviceName": "/dev/sdy", "NoDevice": ""},
        ],
        "TagSpecifications": [
            {
                "ResourceType": "image",
                "Tags": [
                    {"Key": "team", "Value": "web"},
                    {"Key": "env", "Value": "prod"},
                    {"Key": "ebs-snapshot-compactor:stack", "Value": STACK},
                    {"Key": "ebs-snapshot-compactor:execution", "Value": EXECUTION},
                    {"Key": "ebs-snapshot-compactor:role", "Value": "image"},
                    {"Key": "ebs-snapshot-compactor:source-image", "Value": SOURCE_IMAGE_ID},
                    # delivered from birth (issue #22, finding 8): the roles may not deregister it
                    {"Key": "ebs-snapshot-compactor:delivered", "Value": "true"},
                ],
            }
        ],
    }
    assert result["warnings"] == []
    assert result["imageId"] in {
        i["ImageId"] for i in world.ec2.describe_images(Owners=["self"])["Images"]
    }


def test_architecture_is_always_passed(world: World) -> None:
    plan, snapshots = compacted_image_job(world, Architecture="x86_64", BootMode=None)
    calls = capture(aws.ec2(), "RegisterImage")
    register(world, plan, snapshots)
    assert calls[0]["Architecture"] == "x86_64"
    assert "BootMode" not in calls[0]


def test_new_snapshots_carry_ami_lineage(world: World) -> None:
    _, snapshots = compacted_image_job(world)
    for item in snapshots["snapshots"]:
        snapshot = world.ec2.describe_snapshots(SnapshotIds=[item["snapshotId"]])["Snapshots"][0]
        found = {t["Key"]: t["Value"] for t in snapshot["Tags"]}
        assert found["ebs-snapshot-compactor:source-image"] == SOURCE_IMAGE_ID
        assert found["ebs-snapshot-compactor:source-snapshot"] == item["sourceSnapshotId"]
        assert snapshot["Description"] == f"vol {item['index']}"


def test_warns_about_what_register_image_cannot_carry(world: World) -> None:
    # paid, Windows and product-code AMIs never get here: prepare refuses them (test_prepare)
    plan, snapshots = compacted_image_job(world, DeprecationTime="2027-01-01T00:00:00.000Z")
    warnings = register(world, plan, snapshots)["warnings"]
    assert len(warnings) == 1
    assert "deprecated at 2027-01-01T00:00:00.000Z" in warnings[0]


def test_snapshot_job_registers_nothing(world: World) -> None:
    plan, _, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    snapshots = create_snapshots.handler({"plan": plan, "attached": ready}, world.context)
    calls = capture(aws.ec2(), "RegisterImage")
    assert register(world, plan, snapshots) == {"imageId": None, "warnings": []}
    assert calls == []


def test_a_retried_call_returns_the_ami_of_the_first(world: World) -> None:
    plan, snapshots = compacted_image_job(world)
    first = register(world, plan, snapshots)
    aws.ec2().create_tags(
        Resources=[first["imageId"]],
        Tags=[
            {"Key": "ebs-snapshot-compactor:stack", "Value": STACK},
            {"Key": "ebs-snapshot-compactor:execution", "Value": EXECUTION},
        ],
    )  # moto's RegisterImage drops TagSpecifications; EC2 applies them
    assert register(world, plan, snapshots)["imageId"] == first["imageId"]


def test_name_taken_by_someone_else(world: World) -> None:
    plan, snapshots = compacted_image_job(world)
    boto3.client("ec2", region_name=REGION).register_image(Name=plan["imageName"])
    with pytest.raises(
        errors.ImageRegistrationFailed, match=r"already exists.*pass another imageName"
    ):
        register(world, plan, snapshots)


def test_register_image_refused(world: World) -> None:
    plan, snapshots = compacted_image_job(world)
    respond(
        aws.ec2(),
        "RegisterImage",
        lambda _: error_response("InvalidParameterValue", "bad boot mode"),
    )
    with pytest.raises(
        errors.ImageRegistrationFailed, match="InvalidParameterValue: bad boot mode"
    ):
        register(world, plan, snapshots)
