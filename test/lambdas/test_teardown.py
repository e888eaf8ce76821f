"""teardown against moto, with the resources an execution leaves made directly (not through the
other handlers), and EC2's states and refusals played back where moto has none."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from compactor import aws, errors
from compactor.handlers import teardown
from conftest import EXECUTION, STACK, World
from support import amend, error_response, respond

OTHER_STACK = "someone-elses-stack"
DELIVERED = {"Key": "ebs-snapshot-compactor:delivered", "Value": "true"}
EMPTY = {
    "remaining": 0,
    "terminatedInstances": [],
    "deletedVolumes": [],
    "deletedSnapshots": [],
    "deregisteredImages": [],
    "deletedObjects": [],
    "keptSnapshots": [],
    "keptImages": [],
    "transientErrors": [],
    "leftToTimeOut": [],
}


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


def volume(world: World, role: str = "transfer-instance", **owner: str) -> str:
    return str(
        world.ec2.create_volume(
            Size=1,
            AvailabilityZone=world.azs[0],
            TagSpecifications=[{"ResourceType": "volume", "Tags": owner_tags(role=role, **owner)}],
        )["VolumeId"]
    )


def new_snapshot(world: World, delivered: bool = False) -> str:
    source = world.ec2.create_volume(Size=1, AvailabilityZone=world.azs[0])["VolumeId"]
    tags = owner_tags() + ([DELIVERED] if delivered else [])
    snapshot_id = world.ec2.create_snapshot(
        VolumeId=source, TagSpecifications=[{"ResourceType": "snapshot", "Tags": tags}]
    )["SnapshotId"]
    world.ec2.delete_volume(VolumeId=source)
    return str(snapshot_id)


def image(world: World, snapshot_ids: list[str]) -> str:
    """An AMI of the execution on `snapshot_ids` (moto ignores RegisterImage's mappings, so
    DescribeImages is amended to list them)."""
    image_id = str(world.ec2.register_image(Name=f"compacted-{len(snapshot_ids)}")["ImageId"])
    world.ec2.create_tags(Resources=[image_id], Tags=owner_tags(role="image"))
    mappings = [
        {"DeviceName": f"/dev/xvd{chr(ord('a') + n)}", "Ebs": {"SnapshotId": snapshot_id}}
        for n, snapshot_id in enumerate(snapshot_ids)
    ]

    def change(parsed: dict[str, Any]) -> None:
        for found in parsed.get("Images", []):
            if found["ImageId"] == image_id:
                found["BlockDeviceMappings"] = mappings

    amend(aws.ec2(), "DescribeImages", change)
    return image_id


def instance(world: World, execution: str = EXECUTION) -> str:
    return str(
        world.ec2.run_instances(
            MinCount=1,
            MaxCount=1,
            ImageId=world.base_image_id,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": owner_tags(execution=execution, role="transfer-instance"),
                }
            ],
        )["Instances"][0]["InstanceId"]
    )


def foreign_resources(world: World) -> dict[str, set[str]]:
    """Resources teardown must never touch: untagged, another execution, another stack, or
    only one of the two ownership tags."""
    volumes, snapshots, images = set(), set(), set()
    for tags in (
        [],
        owner_tags(execution="exec-2", role="transfer-instance"),
        owner_tags(stack=OTHER_STACK, role="transfer-instance"),
        owner_tags()[1:],  # execution tag without the stack tag
        owner_tags()[:1] + owner_tags()[2:],  # stack tag without the execution tag
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
    return {
        "instances": {instance(world, execution="exec-2")},
        "volumes": volumes,
        "snapshots": snapshots,
        "images": images,
    }


def workflow_resources(world: World, delivered: bool) -> dict[str, Any]:
    """What an execution leaves: the instance, a stray volume, two new snapshots and an AMI."""
    snapshots = [new_snapshot(world, delivered), new_snapshot(world, delivered)]
    return {
        "instance": instance(world),
        "stray": volume(world),
        "snapshots": snapshots,
        "image": image(world, snapshots),
    }


def tagged_with_execution(world: World) -> dict[str, set[str]]:
    """Read with a client of its own: the package's client may have errors injected."""
    ec2 = boto3.client("ec2")
    owned = [
        {"Name": "tag:ebs-snapshot-compactor:stack", "Values": [STACK]},
        {"Name": "tag:ebs-snapshot-compactor:execution", "Values": [EXECUTION]},
    ]
    return {
        "instances": {
            i["InstanceId"]
            for r in ec2.describe_instances(Filters=owned)["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        },
        "volumes": {v["VolumeId"] for v in ec2.describe_volumes(Filters=owned)["Volumes"]},
        "snapshots": {
            s["SnapshotId"]
            for s in ec2.describe_snapshots(OwnerIds=["self"], Filters=owned)["Snapshots"]
        },
        "images": {
            i["ImageId"] for i in ec2.describe_images(Owners=["self"], Filters=owned)["Images"]
        },
    }


def assert_untouched(world: World, foreign: dict[str, set[str]]) -> None:
    inventory = world.inventory()
    for kind, ids in foreign.items():
        assert ids <= inventory[kind], kind


def test_success_removes_the_temporary_resources_and_keeps_the_outputs(world: World) -> None:
    created = workflow_resources(world, delivered=True)
    foreign = foreign_resources(world)
    first = run(world, "success")
    assert first["terminatedInstances"] == [created["instance"]]
    assert first["deletedVolumes"] == [created["stray"]]
    assert (first["deletedSnapshots"], first["deregisteredImages"]) == ([], [])
    assert first["remaining"] == 1  # the instance is shutting down
    assert run(world, "success") == EMPTY
    assert tagged_with_execution(world) == {
        "instances": set(),
        "volumes": set(),
        "snapshots": set(created["snapshots"]),
        "images": {created["image"]},
    }
    assert_untouched(world, foreign)


@pytest.mark.parametrize("outcome", ["failure", "cleanup"])
def test_failure_and_cleanup_remove_undelivered_outputs(world: World, outcome: str) -> None:
    created = workflow_resources(world, delivered=False)
    foreign = foreign_resources(world)
    first = run(world, outcome, keep={"snapshotIds": [], "imageId": None})
    assert set(first["deletedSnapshots"]) == set(created["snapshots"])
    assert first["deregisteredImages"] == [created["image"]]
    assert (first["keptSnapshots"], first["keptImages"]) == ([], [])
    assert run(world, outcome)["remaining"] == 0
    assert tagged_with_execution(world) == {
        "instances": set(),
        "volumes": set(),
        "snapshots": set(),
        "images": set(),
    }
    assert run(world, outcome) == EMPTY
    assert_untouched(world, foreign)


@pytest.mark.parametrize("outcome", ["failure", "cleanup"])
def test_delivered_snapshots_and_their_ami_survive_failure_and_cleanup(
    world: World, outcome: str
) -> None:
    created = workflow_resources(world, delivered=True)
    first = run(world, outcome, keep={"snapshotIds": [], "imageId": None})
    assert first["terminatedInstances"] == [created["instance"]]
    assert first["deletedVolumes"] == [created["stray"]]
    assert (first["deletedSnapshots"], first["deregisteredImages"]) == ([], [])
    assert set(first["keptSnapshots"]) == set(created["snapshots"])
    assert first["keptImages"] == [created["image"]]
    assert run(world, outcome)["remaining"] == 0
    remaining = tagged_with_execution(world)
    assert remaining["snapshots"] == set(created["snapshots"])
    assert remaining["images"] == {created["image"]}


def test_any_delivered_snapshot_keeps_every_ami_but_undelivered_snapshots_go(
    world: World,
) -> None:
    delivered = new_snapshot(world, delivered=True)
    undelivered = new_snapshot(world, delivered=False)
    other_image = image(world, [undelivered])
    result = run(world, "cleanup")
    assert result["keptImages"] == [other_image]
    # the AMI stays, and so does the snapshot it uses (deleting it would fail InvalidSnapshot.InUse)
    assert set(result["keptSnapshots"]) == {delivered, undelivered}
    assert result["deletedSnapshots"] == []


def test_an_ami_tagged_delivered_stays_and_so_do_its_snapshots(world: World) -> None:
    """register_image tags the AMI delivered (the roles may not deregister it): teardown keeps it,
    and the snapshots it uses, even where no snapshot of the execution carries the tag."""
    snapshot = new_snapshot(world, delivered=False)
    ami = image(world, [snapshot])
    world.ec2.create_tags(Resources=[ami], Tags=[DELIVERED])
    result = run(world, "cleanup")
    assert (result["keptImages"], result["deregisteredImages"]) == ([ami], [])
    assert (result["keptSnapshots"], result["deletedSnapshots"]) == ([snapshot], [])


def test_a_partly_delivered_execution_deletes_only_the_undelivered_snapshot(world: World) -> None:
    delivered = new_snapshot(world, delivered=True)
    undelivered = new_snapshot(world, delivered=False)
    result = run(world, "failure")
    assert result["deletedSnapshots"] == [undelivered]
    assert result["keptSnapshots"] == [delivered]
    assert tagged_with_execution(world)["snapshots"] == {delivered}


def test_failure_keeps_what_keep_names(world: World) -> None:
    created = workflow_resources(world, delivered=False)
    run(world, "failure", keep={"snapshotIds": created["snapshots"], "imageId": created["image"]})
    remaining = tagged_with_execution(world)
    assert remaining["snapshots"] == set(created["snapshots"])
    assert remaining["images"] == {created["image"]}


def test_retry_is_like_success_but_deletes_the_undelivered_snapshots(world: World) -> None:
    """Before a relaunch: the direct snapshots of the lost attempt go (the next attempt starts
    new ones); an AMI and the snapshots it uses stay (none exists before delivery)."""
    created = workflow_resources(world, delivered=False)
    lost_attempt = new_snapshot(world, delivered=False)
    delivered = new_snapshot(world, delivered=True)
    result = run(world, "retry")
    assert result["terminatedInstances"] == [created["instance"]]
    assert (result["deletedSnapshots"], result["deregisteredImages"]) == ([lost_attempt], [])
    assert set(result["keptSnapshots"]) == {*created["snapshots"], delivered}
    assert tagged_with_execution(world)["snapshots"] == {*created["snapshots"], delivered}


@pytest.mark.parametrize(
    ("state", "deleted"),
    [
        ("creating", False),
        ("available", True),
        ("in-use", False),
        ("deleting", False),
        ("error", True),
        ("some-future-state", False),
    ],
)
def test_volume_in_every_state(world: World, state: str, deleted: bool) -> None:
    volume_id = volume(world, role="source-volume")
    amend(
        aws.ec2(),
        "DescribeVolumes",
        lambda parsed: [v.update(State=state) for v in parsed["Volumes"]],
    )
    result = run(world, "success")
    assert result["deletedVolumes"] == ([volume_id] if deleted else [])
    assert result["remaining"] == (0 if deleted else 1)
    assert (volume_id in world.inventory()["volumes"]) is not deleted


@pytest.mark.parametrize("attachment", ["attaching", "attached", "detaching"])
def test_attached_volume_waits_for_the_terminated_instance(world: World, attachment: str) -> None:
    instance_id = instance(world)
    volume_id = volume(world, role="source-volume")
    world.ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

    def still_attached(parsed: dict[str, Any]) -> None:
        # moto detaches at TerminateInstances at once; EC2 takes its time
        for found in parsed["Volumes"]:
            found["State"] = "in-use"
            found["Attachments"] = [
                {"VolumeId": found["VolumeId"], "InstanceId": instance_id, "State": attachment}
            ]

    amend(aws.ec2(), "DescribeVolumes", still_attached)
    result = run(world, "success")
    assert result["terminatedInstances"] == [instance_id]
    assert result["deletedVolumes"] == []
    assert result["remaining"] == 2  # the instance (shutting down) and the attached volume
    assert volume_id in world.inventory()["volumes"]


@pytest.mark.parametrize("code", ["VolumeInUse", "IncorrectState"])
def test_busy_volume_counts_as_remaining(world: World, code: str) -> None:
    volume(world)
    respond(aws.ec2(), "DeleteVolume", lambda _: error_response(code, "busy"))
    result = run(world, "success")
    assert result["deletedVolumes"] == []
    assert result["remaining"] == 1
    assert len(result["transientErrors"]) == 1
    assert code in result["transientErrors"][0]


def test_snapshot_of_a_deregistering_ami_counts_as_remaining(world: World) -> None:
    created = workflow_resources(world, delivered=False)
    respond(
        aws.ec2(),
        "DeleteSnapshot",
        lambda params: error_response(
            "InvalidSnapshot.InUse",
            f"The snapshot {params['SnapshotId']} is currently in use by {created['image']}",
        ),
    )
    result = run(world, "cleanup")
    assert result["deregisteredImages"] == [created["image"]]
    assert result["deletedSnapshots"] == []
    assert result["remaining"] == 1 + len(created["snapshots"])  # the instance and the snapshots
    assert all("InvalidSnapshot.InUse" in e for e in result["transientErrors"])
    aws.reset_clients()  # the deregistration has settled
    assert set(run(world, "cleanup")["deletedSnapshots"]) == set(created["snapshots"])


@pytest.mark.parametrize(
    ("operation", "left", "code"),
    [
        ("DescribeInstances", {"instances"}, "RequestLimitExceeded"),
        ("TerminateInstances", {"instances"}, "RequestLimitExceeded"),
        ("DescribeVolumes", {"volumes"}, "RequestLimitExceeded"),
        ("DeleteVolume", {"volumes"}, "InternalError"),
        ("DescribeSnapshots", {"snapshots", "images"}, "RequestLimitExceeded"),
        ("DescribeImages", {"snapshots", "images"}, "ServiceUnavailable"),
        ("DeregisterImage", {"images"}, "RequestLimitExceeded"),
        ("DeleteSnapshot", {"snapshots"}, "InternalError"),
    ],
)
def test_throttling_or_5xx_counts_as_remaining_and_never_raises(
    world: World, operation: str, left: set[str], code: str
) -> None:
    workflow_resources(world, delivered=False)
    respond(aws.ec2(), operation, lambda _: error_response(code, "slow down"))
    result = run(world, "cleanup")
    assert result["remaining"] >= 1
    assert any(operation in e and code in e for e in result["transientErrors"])
    remaining = tagged_with_execution(world)
    for kind in ("volumes", "snapshots", "images"):
        assert bool(remaining[kind]) is (kind in left), kind
    aws.reset_clients()  # the throttling is over: the next calls finish the job
    for _ in range(3):
        run(world, "cleanup")
    assert run(world, "cleanup") == EMPTY


def test_an_unexpected_error_still_raises(world: World) -> None:
    volume(world)
    respond(aws.ec2(), "DeleteVolume", lambda _: error_response("UnauthorizedOperation", "no"))
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        run(world, "success")


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
    workflow_resources(world, delivered=False)
    before = world.inventory()
    with pytest.raises(errors.InvalidInput, match=complaint):
        teardown.handler(event, world.context)
    assert world.inventory() == before
