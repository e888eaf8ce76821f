"""copySharing in the twin (issue #10): the emulator's AMI sharing and deprecation behave like EC2's
(twin/emulator/ami_attributes.py), and a whole AMI compaction with `copySharing: true` gives the new
AMI and its snapshots the source's accounts, OU and deprecation time, never makes anything public,
and every call the Lambdas make is allowed by the synthesized roles (twin/iam).

The scenario tests deploy the synthesized stack (TWIN_CDK_OUT or a synth) and run the real state
machine on the emulator: ~40 s each; the emulator tests need no stack."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from twin.context import Context, setup
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator
from twin.iam.check import check_calls
from twin.iam.recorder import CALLER_HEADER
from twin.runs import run_execution
from twin.scenario import Options

ACCOUNT_A = "111122223333"
ACCOUNT_B = "444455556666"
ORG = "arn:aws:organizations::123456789012:organization/o-abc123def4"
OU = "arn:aws:organizations::123456789012:ou/o-abc123def4/ou-ab12-cdef3456"


def _code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


# --- the emulator ------------------------------------------------------------------------------


def test_a_registered_ami_is_pending_first_and_cannot_be_shared_yet(emulator: Emulator) -> None:
    ec2 = emulator.boto3_client("ec2")
    image_id = ec2.register_image(Name="pending-test", RootDeviceName="/dev/xvda")["ImageId"]
    with pytest.raises(ClientError) as refused:
        ec2.modify_image_attribute(
            ImageId=image_id, LaunchPermission={"Add": [{"UserId": ACCOUNT_A}]}
        )
    assert _code(refused) == "InvalidAMIID.Unavailable"
    assert "currently pending" in str(refused.value)
    states = [ec2.describe_images(ImageIds=[image_id])["Images"][0]["State"] for _ in range(2)]
    assert states == ["pending", "available"]
    ec2.modify_image_attribute(
        ImageId=image_id,
        LaunchPermission={"Add": [{"UserId": ACCOUNT_A}, {"OrganizationArn": ORG},
                                  {"OrganizationalUnitArn": OU}]},
    )  # fmt: skip
    found = ec2.describe_image_attribute(ImageId=image_id, Attribute="launchPermission")
    assert sorted(map(str, found["LaunchPermissions"])) == sorted(
        map(str, [{"UserId": ACCOUNT_A}, {"OrganizationArn": ORG}, {"OrganizationalUnitArn": OU}])
    )
    with pytest.raises(ClientError) as bad:
        ec2.modify_image_attribute(
            ImageId=image_id, LaunchPermission={"Add": [{"OrganizationArn": "o-abc123def4"}]}
        )
    assert _code(bad) == "InvalidParameterValue"


def test_image_deprecation_like_ec2(emulator: Emulator) -> None:
    ec2 = emulator.boto3_client("ec2")
    image_id = ec2.register_image(Name="deprecation-test", RootDeviceName="/dev/xvda")["ImageId"]
    for _ in range(2):  # pending in the first answer, available in the second
        ec2.describe_images(ImageIds=[image_id])
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30, seconds=40)
    assert ec2.enable_image_deprecation(ImageId=image_id, DeprecateAt=at)["Return"] is True
    image = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    rounded = (at + timedelta(seconds=30)).replace(second=0)
    assert image["DeprecationTime"] == rounded.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    for past_or_far in (
        datetime.now(UTC) - timedelta(hours=1),
        datetime.now(UTC) + timedelta(days=3700),
    ):
        with pytest.raises(ClientError) as refused:
            ec2.enable_image_deprecation(ImageId=image_id, DeprecateAt=past_or_far)
        assert _code(refused) == "InvalidParameterValue"
    ec2.disable_image_deprecation(ImageId=image_id)
    assert "DeprecationTime" not in ec2.describe_images(ImageIds=[image_id])["Images"][0]


# --- a whole compaction ------------------------------------------------------------------------


@pytest.fixture
def ami_context(cdk_out: Path, tmp_path: Path) -> Iterator[Context]:
    """The stack deployed into a fresh emulator with a registered source AMI (two volumes)."""
    opts = Options(cdk_out=cdk_out, out_dir=tmp_path / "out", picture=False, input="ami",
                   diskless=True)  # sharing is the control plane's: no disks  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="twin-sharing-"))
    try:
        with Emulator(work / "emulator", Faults(), diskless=True) as emu:
            yield setup(emu, opts, None, work, tmp_path / "logs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


# the calls copySharing adds; every other call's denials are test_scenarios.py's to catch
SHARING_CALLS = ("Attribute", "ImageDeprecation", "DescribeImages")


def sharing_denials(ctx: Context, usage_from: str | None = "copySharing of an AMI") -> list[str]:
    """usage_from: None once the test made a call by hand (twin/iam/usage.py proves the code's)."""
    calls = check_calls(ctx.emu.calls_path, ctx.d, usage_from=usage_from)
    denials = [str(d) for d in calls]
    return [d for d in denials if any(call in d for call in SHARING_CALLS)]


def _compact(ctx: Context) -> tuple[Any, dict[str, Any]]:
    source = ctx.registered
    result = run_execution(ctx, {"imageId": source.image_id, "copySharing": True})
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    return result, result.output


def test_the_new_ami_and_its_snapshots_get_the_sources_sharing(ami_context: Context) -> None:
    ctx = ami_context
    ec2 = ctx.emu.boto3_client("ec2")
    source = ctx.registered
    permissions = [{"UserId": ACCOUNT_A}, {"UserId": ACCOUNT_B}, {"OrganizationalUnitArn": OU}]
    ec2.modify_image_attribute(ImageId=source.image_id, LaunchPermission={"Add": permissions})
    root, data = source.snapshot_ids
    ec2.modify_snapshot_attribute(
        SnapshotId=root, Attribute="createVolumePermission", OperationType="add",
        UserIds=[ACCOUNT_A],
    )  # fmt: skip
    deprecate_at = (datetime.now(UTC) + timedelta(days=90)).replace(second=0, microsecond=0)
    ec2.enable_image_deprecation(ImageId=source.image_id, DeprecateAt=deprecate_at)

    _, report = _compact(ctx)
    image_id = report["imageId"]
    found = ec2.describe_image_attribute(ImageId=image_id, Attribute="launchPermission")
    assert sorted(map(str, found["LaunchPermissions"])) == sorted(map(str, permissions))
    image = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    assert image["Public"] is False
    assert image["DeprecationTime"] == deprecate_at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    by_source = {v["sourceSnapshotId"]: v["newSnapshotId"] for v in report["volumes"]}
    volume_permissions = {
        sid: ec2.describe_snapshot_attribute(
            SnapshotId=by_source[sid], Attribute="createVolumePermission"
        )["CreateVolumePermissions"]
        for sid in (root, data)
    }
    assert volume_permissions == {root: [{"UserId": ACCOUNT_A}], data: []}
    assert report["warnings"] == [] and report["notes"] == []
    assert sharing_denials(ctx) == []


def test_a_public_source_gives_a_private_ami_and_a_note(ami_context: Context) -> None:
    ctx = ami_context
    ec2 = ctx.emu.boto3_client("ec2")
    source = ctx.registered
    ec2.modify_image_attribute(
        ImageId=source.image_id, LaunchPermission={"Add": [{"Group": "all"}, {"UserId": ACCOUNT_A}]}
    )
    ec2.modify_snapshot_attribute(
        SnapshotId=source.snapshot_ids[0], Attribute="createVolumePermission",
        OperationType="add", GroupNames=["all"],
    )  # fmt: skip
    assert ec2.describe_images(ImageIds=[source.image_id])["Images"][0]["Public"] is True

    _, report = _compact(ctx)
    image_id = report["imageId"]
    assert ec2.describe_images(ImageIds=[image_id])["Images"][0]["Public"] is False
    found = ec2.describe_image_attribute(ImageId=image_id, Attribute="launchPermission")
    assert found["LaunchPermissions"] == [{"UserId": ACCOUNT_A}]
    for volume in report["volumes"]:
        answer = ec2.describe_snapshot_attribute(
            SnapshotId=volume["newSnapshotId"], Attribute="createVolumePermission"
        )
        assert answer["CreateVolumePermissions"] == []
    assert any(image_id in n and "NOT made public" in n for n in report["notes"]), report["notes"]
    assert sharing_denials(ctx) == []
    # and the task role could not have done it: sharing a snapshot with group all is denied
    register = next(
        f for f in ctx.d.functions.values() if f.handler.endswith("register_image.handler")
    )
    # a client of its own (the emulator's boto3_client is shared): it calls as register_image
    as_register = boto3.client(
        "ec2",
        endpoint_url=ctx.emu.endpoint,
        region_name=ctx.emu.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    as_register.meta.events.register(
        "before-sign.ec2.ModifySnapshotAttribute",
        lambda request, **_: request.headers.__setitem__(CALLER_HEADER, register.name),
    )
    as_register.modify_snapshot_attribute(
        SnapshotId=report["volumes"][0]["newSnapshotId"], Attribute="createVolumePermission",
        OperationType="add", GroupNames=["all"],
    )  # fmt: skip
    (denial,) = sharing_denials(ctx, usage_from=None)
    assert "ec2:ModifySnapshotAttribute" in denial and register.name in denial, denial
    assert denial.endswith("ExplicitlyDenied"), denial  # the Deny, not a missing Allow
