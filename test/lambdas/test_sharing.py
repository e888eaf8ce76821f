"""copySharing (compactor/sharing.py through register_image): the new AMI gets the source AMI's
launch permissions (accounts, organizations, OUs), each new snapshot its source's create-volume
accounts, the AMI the source's deprecation time; nothing ever becomes public. moto registers the
new AMI; the source AMI (which moto cannot register with every attribute) and EC2 calls moto
lacks (EnableImageDeprecation) are played back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from compactor import aws, errors, sharing, validation
from compactor.handlers import create_snapshots, register_image
from conftest import SOURCE_IMAGE_ID, UEFI_DATA, World, ready_instance, source_image
from support import amend, capture, error_response, respond

ACCOUNT_A = "111122223333"
ACCOUNT_B = "444455556666"
ORG = "arn:aws:organizations::123456789012:organization/o-abc123def4"
OU = "arn:aws:organizations::123456789012:ou/o-abc123def4/ou-ab12-cdef3456"
FUTURE = "2031-03-01T12:00:00.000Z"


def serve_source(image: dict[str, Any], launch_permissions: list[dict[str, str]]) -> None:
    """DescribeImages and DescribeImageAttribute of the source AMI; the new AMI's go to moto."""
    ec2 = aws.ec2()
    respond(
        ec2,
        "DescribeImages",
        lambda p: {"Images": [image]} if p.get("ImageIds") == [image["ImageId"]] else None,
    )

    def attribute(params: dict[str, Any]) -> dict[str, Any] | None:
        if params["ImageId"] != image["ImageId"]:
            return None
        if params["Attribute"] == "uefiData":
            return {"ImageId": image["ImageId"], "UefiData": {"Value": UEFI_DATA}}
        return {"ImageId": image["ImageId"], "LaunchPermissions": launch_permissions}

    respond(ec2, "DescribeImageAttribute", attribute)


def shared_job(
    world: World,
    launch_permissions: list[dict[str, str]],
    copy_sharing: bool = True,
    **overrides: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    image = source_image(world, volume_count=2, **overrides)
    serve_source(image, launch_permissions)
    execution_input = {"imageId": SOURCE_IMAGE_ID, "copySharing": copy_sharing}
    plan, _, ready = ready_instance(world, execution_input)
    snapshots = create_snapshots.handler({"plan": plan, "attached": ready}, world.context)
    return plan, snapshots


def deprecations() -> list[dict[str, Any]]:
    """EnableImageDeprecation (moto has none) answered as EC2 does."""
    return respond(aws.ec2(), "EnableImageDeprecation", lambda _: {"Return": True})


def share_snapshot(snapshot_id: str, user_ids: list[str], public: bool = False) -> None:
    aws.ec2().modify_snapshot_attribute(
        SnapshotId=snapshot_id,
        Attribute="createVolumePermission",
        OperationType="add",
        UserIds=user_ids,
        **({"GroupNames": ["all"]} if public else {}),
    )


def register(world: World, plan: dict[str, Any], snapshots: dict[str, Any]) -> dict[str, Any]:
    return register_image.handler({"plan": plan, "snapshots": snapshots}, world.context)


def launch_permissions(image_id: str) -> list[dict[str, str]]:
    answer = aws.ec2().describe_image_attribute(ImageId=image_id, Attribute="launchPermission")
    return list(answer["LaunchPermissions"])


def volume_permissions(snapshot_id: str) -> list[dict[str, str]]:
    answer = aws.ec2().describe_snapshot_attribute(
        SnapshotId=snapshot_id, Attribute="createVolumePermission"
    )
    return list(answer["CreateVolumePermissions"])


def test_copies_accounts_organizations_ous_volume_permissions_and_deprecation(
    world: World,
) -> None:
    permissions = [{"UserId": ACCOUNT_A}, {"UserId": ACCOUNT_B}, {"OrganizationalUnitArn": OU}]
    plan, snapshots = shared_job(world, permissions, DeprecationTime=FUTURE)
    assert plan["copySharing"] is True
    root, data = snapshots["snapshots"]
    share_snapshot(root["sourceSnapshotId"], [ACCOUNT_A])
    deprecated = deprecations()
    result = register(world, plan, snapshots)

    image_id = result["imageId"]
    assert sorted(map(str, launch_permissions(image_id))) == sorted(map(str, permissions))
    assert volume_permissions(root["snapshotId"]) == [{"UserId": ACCOUNT_A}]
    assert volume_permissions(data["snapshotId"]) == []
    assert deprecated == [
        {"ImageId": image_id, "DeprecateAt": datetime(2031, 3, 1, 12, 0, tzinfo=UTC)}
    ]
    assert result["sharing"] == {
        "launchPermissions": permissions,
        "createVolumePermissions": [
            {
                "snapshotId": root["snapshotId"],
                "sourceSnapshotId": root["sourceSnapshotId"],
                "userIds": [ACCOUNT_A],
            }
        ],
        "deprecationTime": "2031-03-01T12:00:00Z",
        "sourcePublic": False,
        "notes": [],
        "warnings": [],
    }
    # the deprecation is copied, so no warning that it is not
    assert result["warnings"] == []


def test_organization_arn_is_copied(world: World) -> None:
    plan, snapshots = shared_job(world, [{"OrganizationArn": ORG}])
    calls = capture(aws.ec2(), "ModifyImageAttribute")
    result = register(world, plan, snapshots)
    assert calls == [
        {"ImageId": result["imageId"], "LaunchPermission": {"Add": [{"OrganizationArn": ORG}]}}
    ]
    assert launch_permissions(result["imageId"]) == [{"OrganizationArn": ORG}]


def test_a_public_source_gives_a_private_copy_and_a_note(world: World) -> None:
    plan, snapshots = shared_job(world, [{"Group": "all"}, {"UserId": ACCOUNT_A}])
    root = snapshots["snapshots"][0]
    share_snapshot(root["sourceSnapshotId"], [ACCOUNT_B], public=True)
    image_calls = capture(aws.ec2(), "ModifyImageAttribute")
    snapshot_calls = capture(aws.ec2(), "ModifySnapshotAttribute")
    result = register(world, plan, snapshots)

    assert launch_permissions(result["imageId"]) == [{"UserId": ACCOUNT_A}]
    assert volume_permissions(root["snapshotId"]) == [{"UserId": ACCOUNT_B}]
    assert "all" not in repr(image_calls) + repr(snapshot_calls)
    image = aws.ec2().describe_images(ImageIds=[result["imageId"]])["Images"][0]
    assert image["Public"] is False
    sharing_result = result["sharing"]
    assert sharing_result["sourcePublic"] is True
    assert any(
        "was NOT made public" in n and result["imageId"] in n for n in sharing_result["notes"]
    )
    assert any(root["snapshotId"] in n for n in sharing_result["notes"])


def test_a_past_deprecation_time_becomes_the_earliest_ec2_accepts(world: World) -> None:
    plan, snapshots = shared_job(world, [], DeprecationTime="2020-01-01T00:00:00.000Z")
    deprecated = deprecations()
    before = datetime.now(UTC)
    result = register(world, plan, snapshots)
    (call,) = deprecated
    assert before < call["DeprecateAt"] <= before + timedelta(minutes=3)
    assert call["DeprecateAt"].second == 0
    (note,) = result["sharing"]["notes"]
    assert "2020-01-01T00:00:00.000Z" in note and "EC2 accepts no past time" in note


def test_a_refused_permission_fails_the_task_naming_the_ami_and_the_rest_is_copied(
    world: World,
) -> None:
    """The sharing is part of what copySharing asks for: not all copied is SharingNotCopied
    (the workflow fails the run as ImageNotDelivered), and nothing copied is undone."""
    plan, snapshots = shared_job(world, [{"UserId": ACCOUNT_A}], DeprecationTime=FUTURE)
    for item in snapshots["snapshots"]:
        share_snapshot(item["sourceSnapshotId"], [ACCOUNT_B])
    respond(
        aws.ec2(),
        "ModifySnapshotAttribute",
        lambda _: error_response(
            "InvalidParameter", "Snapshots encrypted with the AWS Managed CMK can't be shared."
        ),
    )
    deprecated = deprecations()
    with pytest.raises(errors.SharingNotCopied) as raised:
        register(world, plan, snapshots)
    (image,) = [
        i
        for i in aws.ec2().describe_images(Owners=["self"])["Images"]
        if i["Name"] == plan["imageName"]
    ]
    message = str(raised.value)
    assert f"the AMI {image['ImageId']} is registered" in message
    assert message.count("InvalidParameter: Snapshots encrypted") == 2
    assert launch_permissions(image["ImageId"]) == [{"UserId": ACCOUNT_A}]
    assert len(deprecated) == 1


def test_waits_for_a_pending_ami(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, snapshots = shared_job(world, [{"UserId": ACCOUNT_A}])
    answers = iter(["pending", "pending"])

    def pending_at_first(parsed: dict[str, Any]) -> None:
        for image in parsed.get("Images", []):
            if image["ImageId"] != SOURCE_IMAGE_ID:
                image["State"] = next(answers, image["State"])

    amend(aws.ec2(), "DescribeImages", pending_at_first)
    slept: list[float] = []
    monkeypatch.setattr(sharing, "_sleep", slept.append)
    result = register(world, plan, snapshots)
    assert slept == [sharing.POLL_SECONDS, sharing.POLL_SECONDS]
    assert launch_permissions(result["imageId"]) == [{"UserId": ACCOUNT_A}]


def test_still_pending_is_retried_and_the_retry_shares(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan, snapshots = shared_job(world, [{"UserId": ACCOUNT_A}])
    pending = {"on": True}

    def still_pending(parsed: dict[str, Any]) -> None:
        for image in parsed.get("Images", []):
            if image["ImageId"] != SOURCE_IMAGE_ID and pending["on"]:
                image["State"] = "pending"

    amend(aws.ec2(), "DescribeImages", still_pending)
    monkeypatch.setattr(sharing, "_sleep", lambda _: None)
    monkeypatch.setattr(register_image, "DEFAULT_SECONDS_LEFT", 0.0)
    with pytest.raises(errors.TransientAwsError, match=r"still pending.*retries this step"):
        register(world, plan, snapshots)
    (image,) = [
        i
        for i in aws.ec2().describe_images(Owners=["self"])["Images"]
        if i["Name"] == plan["imageName"]
    ]
    # moto's RegisterImage drops TagSpecifications; EC2 applies them
    aws.ec2().create_tags(
        Resources=[image["ImageId"]],
        Tags=[
            {"Key": "ebs-snapshot-compactor:stack", "Value": world.env["STACK_NAME"]},
            {"Key": "ebs-snapshot-compactor:execution", "Value": plan["executionName"]},
        ],
    )
    pending["on"] = False
    monkeypatch.setattr(register_image, "DEFAULT_SECONDS_LEFT", 60.0)
    result = register(world, plan, snapshots)
    assert result["imageId"] == image["ImageId"]
    assert launch_permissions(image["ImageId"]) == [{"UserId": ACCOUNT_A}]


def test_without_copy_sharing_nothing_is_shared(world: World) -> None:
    plan, snapshots = shared_job(
        world, [{"UserId": ACCOUNT_A}], copy_sharing=False, DeprecationTime=FUTURE
    )
    calls = capture(aws.ec2(), "ModifyImageAttribute")
    result = register(world, plan, snapshots)
    assert calls == []
    assert "sharing" not in result
    assert launch_permissions(result["imageId"]) == []
    assert "the new AMI is not" in result["warnings"][0]


def test_copy_sharing_is_for_ami_input_only() -> None:
    with pytest.raises(errors.InvalidInput, match="copySharing applies to AMI input only"):
        validation.parse_execution_input(
            {"snapshotId": "snap-0123456789abcdef0", "copySharing": True}, "us-east-1", "compact"
        )
    with pytest.raises(errors.InvalidInput, match="copySharing 'yes' is invalid"):
        validation.parse_execution_input(
            {"imageId": "ami-0123456789abcdef0", "copySharing": "yes"}, "us-east-1", "compact"
        )
    parsed = validation.parse_execution_input(
        {"snapshotId": "snap-0123456789abcdef0", "copySharing": False}, "us-east-1", "compact"
    )
    assert parsed.copy_sharing is False


def test_the_report_notes_what_copy_sharing_noted_and_could_not_copy() -> None:
    from compactor.report import build

    state = {
        "plan": {"notes": ["re-encrypted"]},
        "image": {
            "imageId": "ami-0123456789abcdef0",
            "warnings": [],
            "sharing": {"notes": ["the source AMI ... was NOT made public"], "warnings": ["w"]},
        },
    }
    assert build._notes(state["plan"], state) == [
        "re-encrypted",
        "the source AMI ... was NOT made public",
        "w",
    ]
    assert build._notes({}, {"image": {"imageId": None, "warnings": []}}) == []


def test_the_report_carries_what_was_shared() -> None:
    from compactor.report import build

    shared = {
        "launchPermissions": [{"UserId": ACCOUNT_A}],
        "createVolumePermissions": [],
        "deprecationTime": None,
        "sourcePublic": False,
        "notes": [],
        "warnings": [],
    }
    image = {"imageId": "ami-1", "warnings": [], "sharing": shared}
    assert build._sharing({"image": image}) == shared
    assert build._sharing({"image": {"imageId": "ami-1", "warnings": []}}) is None
    assert build._sharing({}) is None
