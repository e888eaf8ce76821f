from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.handlers import create_snapshots, teardown

from tests.conftest import EXECUTION, STACK, World, ready_instance
from tests.support import error_response, respond

OTHER_STACK = "someone-elses-stack"


def owner_tags(
    stack: str = STACK, execution: str = EXECUTION, role: str = "snapshot"
) -> list[dict[str, str]]:
    return [
        {"Key": "ebs-snapshot-compactor:stack", "Value": stack},
        {"Key": "ebs-snapshot-compactor:execution", "Value": execution},
        {"Key": "ebs-snapshot-compactor:role", "Value": role},
    ]


def run(world: World, outcome: str, keep: dict[str, Any] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"executionName": EXECUTION, "outcome": outcome}
    if keep is not None:
        event["keep"] = keep
    return teardown.handler(event, world.context)


def foreign_resources(world: World) -> dict[str, set[str]]:
    """Resources teardown must never touch: untagged, another execution, another stack, or
    only one of the two ownership tags."""
    volumes, snapshots, images = set(), set(), set()
    for tags in (
        [],
        owner_tags(execution="exec-2", role="transfer-instance"),
        owner_tags(stack=OTHER_STACK, role="transfer-instance"),
        owner_tags()[1:],  # execution tag without the stack tag
    ):
        spec = [{"ResourceType": "volume", "Tags": tags}] if tags else []
        volume_id = world.ec2.create_volume(
            Size=1, AvailabilityZone=world.azs[0], **({"TagSpecifications": spec} if spec else {})
        )["VolumeId"]
        volumes.add(volume_id)
        snapshot_id = world.ec2.create_snapshot(VolumeId=volume_id)["SnapshotId"]
        image_id = world.ec2.register_image(Name=f"foreign-{len(images)}")["ImageId"]
        if tags:
            world.ec2.create_tags(Resources=[snapshot_id, image_id], Tags=tags)
        snapshots.add(snapshot_id)
        images.add(image_id)
    instance_id = world.ec2.run_instances(
        MinCount=1,
        MaxCount=1,
        ImageId=world.base_image_id,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": owner_tags(execution="exec-2", role="transfer-instance"),
            }
        ],
    )["Instances"][0]["InstanceId"]
    return {
        "instances": {instance_id},
        "volumes": volumes,
        "snapshots": snapshots,
        "images": images,
    }


def workflow_resources(world: World) -> dict[str, Any]:
    """What an execution leaves before teardown: the instance with its volumes, a stray volume,
    new snapshots, and an AMI."""
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    snapshots = create_snapshots.handler({"plan": plan, "ready": ready}, world.context)
    stray = world.ec2.create_volume(
        Size=1,
        AvailabilityZone=world.azs[0],
        TagSpecifications=[
            {"ResourceType": "volume", "Tags": owner_tags(role="transfer-instance")}
        ],
    )["VolumeId"]
    image_id = world.ec2.register_image(Name="compacted")["ImageId"]
    world.ec2.create_tags(Resources=[image_id], Tags=owner_tags(role="image"))
    return {
        "instance": instance["instanceId"],
        "volumes": {v[k] for v in ready["volumes"] for k in ("sourceVolumeId", "targetVolumeId")},
        "stray": stray,
        "snapshots": [s["snapshotId"] for s in snapshots["snapshots"]],
        "image": image_id,
    }


def tagged_with_execution(world: World) -> dict[str, set[str]]:
    owned = [
        {"Name": "tag:ebs-snapshot-compactor:stack", "Values": [STACK]},
        {"Name": "tag:ebs-snapshot-compactor:execution", "Values": [EXECUTION]},
    ]
    return {
        "instances": {
            i["InstanceId"]
            for r in world.ec2.describe_instances(Filters=owned)["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        },
        "volumes": {v["VolumeId"] for v in world.ec2.describe_volumes(Filters=owned)["Volumes"]},
        "snapshots": {
            s["SnapshotId"]
            for s in world.ec2.describe_snapshots(OwnerIds=["self"], Filters=owned)["Snapshots"]
        },
        "images": {
            i["ImageId"]
            for i in world.ec2.describe_images(Owners=["self"], Filters=owned)["Images"]
        },
    }


def test_success_removes_the_temporary_resources_and_keeps_the_outputs(world: World) -> None:
    created = workflow_resources(world)
    foreign = foreign_resources(world)
    first = run(world, "success")
    assert first["terminatedInstances"] == [created["instance"]]
    assert first["deletedVolumes"] == [created["stray"]]
    assert (first["deletedSnapshots"], first["deregisteredImages"]) == ([], [])
    assert first["remaining"] == 1  # the instance is shutting down
    second = run(world, "success")
    assert second == {
        "remaining": 0,
        "terminatedInstances": [],
        "deletedVolumes": [],
        "deletedSnapshots": [],
        "deregisteredImages": [],
    }
    assert tagged_with_execution(world) == {
        "instances": set(),
        "volumes": set(),
        "snapshots": set(created["snapshots"]),
        "images": {created["image"]},
    }
    inventory = world.inventory()
    for kind, ids in foreign.items():
        assert ids <= inventory[kind], kind


def test_failure_also_removes_outputs_except_keep(world: World) -> None:
    created = workflow_resources(world)
    foreign = foreign_resources(world)
    first = run(world, "failure", keep={"snapshotIds": [], "imageId": None})
    assert set(first["deletedSnapshots"]) == set(created["snapshots"])
    assert first["deregisteredImages"] == [created["image"]]
    assert run(world, "failure")["remaining"] == 0
    assert tagged_with_execution(world) == {
        "instances": set(),
        "volumes": set(),
        "snapshots": set(),
        "images": set(),
    }
    third = run(world, "failure")
    assert third == {
        "remaining": 0,
        "terminatedInstances": [],
        "deletedVolumes": [],
        "deletedSnapshots": [],
        "deregisteredImages": [],
    }
    inventory = world.inventory()
    for kind, ids in foreign.items():
        assert ids <= inventory[kind], kind


def test_failure_keeps_what_keep_names(world: World) -> None:
    created = workflow_resources(world)
    run(world, "failure", keep={"snapshotIds": created["snapshots"], "imageId": created["image"]})
    remaining = tagged_with_execution(world)
    assert remaining["snapshots"] == set(created["snapshots"])
    assert remaining["images"] == {created["image"]}


def test_retry_is_like_success(world: World) -> None:
    created = workflow_resources(world)
    result = run(world, "retry")
    assert result["terminatedInstances"] == [created["instance"]]
    assert result["deletedSnapshots"] == []


def test_busy_snapshot_counts_as_remaining(world: World) -> None:
    created = workflow_resources(world)
    respond(
        aws.ec2(),
        "DeleteSnapshot",
        lambda _: error_response("InvalidSnapshot.InUse", "used by ami"),
    )
    result = run(world, "failure")
    assert result["deletedSnapshots"] == []
    assert result["remaining"] >= len(created["snapshots"])


@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        ({"executionName": EXECUTION, "outcome": "done"}, "outcome 'done' is invalid"),
        ({"executionName": "", "outcome": "success"}, "execution name"),
        (
            {"executionName": EXECUTION, "outcome": "failure", "keep": {"snapshotIds": "snap-1"}},
            "list of ids",
        ),
    ],
)
def test_bad_payload_touches_nothing(world: World, event: dict[str, Any], complaint: str) -> None:
    workflow_resources(world)
    before = world.inventory()
    with pytest.raises(errors.InvalidInput, match=complaint):
        teardown.handler(event, world.context)
    assert world.inventory() == before
