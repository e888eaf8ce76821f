from __future__ import annotations

import datetime
import re
from typing import Any

import boto3
import pytest
from compactor import aws, errors, tags
from compactor.handlers import prepare
from conftest import (
    EXECUTION,
    REGION,
    SOURCE_IMAGE_ID,
    UEFI_DATA,
    World,
    serve_image,
    source_image,
)
from support import amend, error_response, respond

READ_ONLY = ("Describe", "Get", "List")


def run(world: World, execution_input: Any) -> dict[str, Any]:
    """prepare, checked to make only read calls, whether it succeeds or fails."""
    calls: list[str] = []

    def record(model: Any, **_: Any) -> None:
        calls.append(model.name)

    clients = [aws.ec2(), aws.kms(), aws.ssm(), aws.events()]
    for client in clients:
        client.meta.events.register("before-parameter-build", record, unique_id="read-only")
    try:
        return prepare.handler(
            {"input": execution_input, "executionName": EXECUTION}, world.context
        )
    finally:
        for client in clients:
            client.meta.events.unregister("before-parameter-build", unique_id="read-only")
        assert [c for c in calls if not c.startswith(READ_ONLY)] == []


def test_snapshot_plan(world: World) -> None:
    snapshot_id = world.snapshot(size=20, tags={"team": "db"})
    plan = run(world, {"snapshotId": snapshot_id, "jobs": 8, "tags": {"env": "prod"}})
    assert plan == {
        "executionName": EXECUTION,
        "source": {"kind": "snapshot", "snapshotId": snapshot_id},
        "volumes": [
            {
                "index": 0,
                "sourceSnapshotId": snapshot_id,
                "deviceName": None,
                "sizeGiB": 20,
                "encrypted": False,
                "kmsKeyId": None,
                "targetKmsKeyId": None,
                "sourceKmsKeyId": None,
                "sourceFullSizeBytes": None,
            }
        ],
        "image": None,
        "method": "allocated",
        "target": "snapshot",
        "jobs": 8,
        "verify": True,
        "fastSnapshotRestoreAzs": [],
        "kmsKeyId": None,
        "imageName": None,
        "tags": {"env": "prod"},
        "sourcesReady": True,
        "pendingSnapshotIds": [],
        # the stack's INSTANCE_TYPES (conftest) wins over the size table
        "instanceTypes": ["m7i.large", "m6i.large"],
        # 15 min + 20 GiB / (650 Mbps / 2) x 2 (verify) x 2 (safety) = 3,015 s
        "compactionPoll": {"intervalSeconds": 120, "maxAttempts": 26},
        "bytesToCopy": 20 * 1024**3,
        "dryRun": False,
        "notes": [],
        "copySharing": False,
    }


def test_snapshot_arn_of_this_region_is_accepted(world: World) -> None:
    snapshot_id = world.snapshot()
    arn = f"arn:aws:ec2:{REGION}::snapshot/{snapshot_id}"
    plan = run(world, {"snapshotId": arn, "method": "trim", "verify": False})
    assert plan["source"] == {"kind": "snapshot", "snapshotId": snapshot_id}
    assert (plan["method"], plan["verify"]) == ("trim", False)


def test_full_snapshot_size_is_recorded(world: World) -> None:
    snapshot_id = world.snapshot()

    def with_size(parsed: dict[str, Any]) -> None:
        for snapshot in parsed["Snapshots"]:
            snapshot["FullSnapshotSizeInBytes"] = 123_456_789

    amend(aws.ec2(), "DescribeSnapshots", with_size)
    assert (
        run(world, {"snapshotId": snapshot_id})["volumes"][0]["sourceFullSizeBytes"] == 123_456_789
    )


@pytest.mark.parametrize(
    ("execution_input", "complaint"),
    [
        (["snap-0123456789abcdef0"], "must be a JSON object"),
        ({"snapshotID": "snap-0123456789abcdef0"}, "unknown input key\\(s\\) snapshotID"),
        ({}, "neither was given"),
        ({"snapshotId": "snap-0123456789abcdef0", "imageId": "ami-0123456789abcdef0"}, "both were"),
        ({"snapshotId": "vol-0123456789abcdef0"}, "neither a snapshot id"),
        ({"imageId": "snap-0123456789abcdef0"}, "is not an AMI id"),
        ({"snapshotId": "SNAP", "jobs": 0}, "neither a snapshot id"),
        ({"snapshotId": "snap-0123456789abcdef0", "jobs": 0}, "jobs 0 is invalid"),
        ({"snapshotId": "snap-0123456789abcdef0", "jobs": 65}, "jobs 65 is invalid"),
        ({"snapshotId": "snap-0123456789abcdef0", "jobs": True}, "jobs True is invalid"),
        ({"snapshotId": "snap-0123456789abcdef0", "jobs": "16"}, "jobs '16' is invalid"),
        ({"snapshotId": "snap-0123456789abcdef0", "method": "dd"}, "method 'dd' is invalid"),
        ({"snapshotId": "snap-0123456789abcdef0", "verify": "yes"}, "verify 'yes' is invalid"),
        (
            {"snapshotId": "snap-0123456789abcdef0", "fastSnapshotRestoreAzs": ["use1-az1"]},
            "not an Availability Zone name",
        ),
        (
            {"snapshotId": "snap-0123456789abcdef0", "fastSnapshotRestoreAzs": ["us-west-2a"]},
            "us-west-2a is not an Availability Zone of us-east-1",
        ),
        (
            {"snapshotId": "snap-0123456789abcdef0", "fastSnapshotRestoreAzs": "us-east-1a"},
            "use a list",
        ),
        ({"snapshotId": "snap-0123456789abcdef0", "kmsKeyId": "my key"}, "kmsKeyId 'my key'"),
        ({"snapshotId": "snap-0123456789abcdef0", "tags": {"aws:x": "1"}}, "reserved"),
        ({"snapshotId": "snap-0123456789abcdef0", "tags": {"compact": "1"}}, "trigger tag"),
        ({"snapshotId": "snap-0123456789abcdef0", "tags": {"a": 1}}, "string keys and values"),
        ({"snapshotId": "snap-0123456789abcdef0", "imageName": "x-compact"}, "AMI input only"),
        ({"imageId": "ami-0123456789abcdef0", "imageName": "a|b"}, "imageName 'a\\|b' is invalid"),
    ],
)
def test_invalid_input_is_refused_and_creates_nothing(
    world: World, execution_input: Any, complaint: str
) -> None:
    before = world.inventory()
    with pytest.raises(errors.InvalidInput, match=complaint):
        run(world, execution_input)
    assert world.inventory() == before


def test_too_many_tags_for_the_copy(world: World) -> None:
    source = world.snapshot(tags={f"s{n}": "x" for n in range(30)})
    extra = tags.MAX_PER_RESOURCE + 1 - 30 - tags.OWN_TAGS_PER_OUTPUT
    with pytest.raises(errors.InvalidInput, match=f"copy of {source} would need 51 tags"):
        run(world, {"snapshotId": source, "tags": {f"i{n}": "y" for n in range(extra)}})
    # keys the copy shares with the input count once
    run(world, {"snapshotId": source, "tags": {f"s{n}": "y" for n in range(16)}})


def test_snapshot_in_another_region(world: World) -> None:
    arn = "arn:aws:ec2:eu-west-1:123456789012:snapshot/snap-0123456789abcdef0"
    with pytest.raises(errors.SnapshotInOtherRegion, match=r"is in eu-west-1.*copy the snapshot"):
        run(world, {"snapshotId": arn})


def test_snapshot_not_found(world: World) -> None:
    with pytest.raises(errors.SnapshotNotFound) as caught:
        run(world, {"snapshotId": "snap-0123456789abcdef0"})
    assert (
        "snap-0123456789abcdef0 not found in us-east-1: check the id, or copy it to this Region"
        in str(caught.value)
    )


def snapshot_state(**fields: Any) -> None:
    """DescribeSnapshots answers with these fields on every snapshot (moto's own otherwise)."""
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [s.update(fields) for s in parsed["Snapshots"]],
    )


def test_pending_snapshot_gives_a_plan_that_is_not_ready(world: World) -> None:
    """A snapshot tagged at creation is still pending: prepare checks everything it can, counts
    the whole volume (no FullSnapshotSizeInBytes yet) and says the sources are not ready."""
    snapshot_id = world.snapshot(size=20)
    snapshot_state(State="pending", Progress="42%")
    plan = run(world, {"snapshotId": snapshot_id})
    assert (plan["sourcesReady"], plan["pendingSnapshotIds"]) == (False, [snapshot_id])
    assert plan["volumes"][0]["sourceFullSizeBytes"] is None
    assert plan["bytesToCopy"] == 20 * 1024**3
    assert plan["instanceTypes"] and plan["compactionPoll"]["maxAttempts"] >= 1


def test_pending_snapshot_of_a_big_mostly_empty_volume_is_not_refused_as_too_large(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While pending, the whole 1000 GiB volume counts and would not fit 3 h; the completed
    snapshot holds 1 GiB and does: only the final plan may refuse."""
    monkeypatch.setenv("STATE_MACHINE_TIMEOUT_MINUTES", "180")
    snapshot_id = world.snapshot(size=1000)
    snapshot_state(State="pending")
    assert run(world, {"snapshotId": snapshot_id})["sourcesReady"] is False
    snapshot_state(State="completed", FullSnapshotSizeInBytes=1024**3)
    assert run(world, {"snapshotId": snapshot_id})["sourcesReady"] is True
    snapshot_state(State="completed", FullSnapshotSizeInBytes=1000 * 1024**3)
    with pytest.raises(errors.JobTooLarge):
        run(world, {"snapshotId": snapshot_id})


def test_pending_snapshot_is_still_validated(world: World) -> None:
    snapshot_id = world.snapshot(size=1025)
    snapshot_state(State="pending")
    with pytest.raises(errors.VolumeTooLarge):
        run(world, {"snapshotId": snapshot_id})


def test_recovering_snapshot_is_waited_for(world: World) -> None:
    snapshot_id = world.snapshot()
    snapshot_state(State="recovering")
    assert run(world, {"snapshotId": snapshot_id})["pendingSnapshotIds"] == [snapshot_id]


def test_completed_snapshot_gives_the_final_plan(world: World) -> None:
    snapshot_id = world.snapshot(size=20)
    snapshot_state(FullSnapshotSizeInBytes=3 * 1024**3)
    plan = run(world, {"snapshotId": snapshot_id})
    assert (plan["sourcesReady"], plan["pendingSnapshotIds"]) == (True, [])
    assert plan["bytesToCopy"] == 3 * 1024**3


def test_snapshot_in_state_error(world: World) -> None:
    snapshot_id = world.snapshot()
    snapshot_state(State="error", StateMessage="KMS key is disabled")
    before = world.inventory()
    with pytest.raises(
        errors.SnapshotNotCompleted,
        match=rf"{snapshot_id} is in state error \(KMS key is disabled\).*take a new snapshot",
    ):
        run(world, {"snapshotId": snapshot_id})
    assert world.inventory() == before


def test_snapshot_in_the_recycle_bin(world: World) -> None:
    snapshot_id = world.snapshot()
    snapshot_state(State="recoverable")
    with pytest.raises(errors.SnapshotNotCompleted, match="RestoreSnapshotFromRecycleBin"):
        run(world, {"snapshotId": snapshot_id})


def test_archived_snapshot_is_refused(world: World) -> None:
    snapshot_id = world.snapshot()
    snapshot_state(StorageTier="archive")
    before = world.inventory()
    with pytest.raises(
        errors.SnapshotArchived,
        match=rf"{snapshot_id} is in the archive storage tier.*RestoreSnapshotTier",
    ):
        run(world, {"snapshotId": snapshot_id})
    assert world.inventory() == before


def test_archived_snapshot_names_the_restore_expiry(world: World) -> None:
    snapshot_state(
        StorageTier="archive",
        RestoreExpiryTime=datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
    )
    with pytest.raises(errors.SnapshotArchived, match="restore ended at 2026-01-02T03:04:05"):
        run(world, {"snapshotId": world.snapshot()})


def test_temporary_restore_must_outlast_the_job(world: World) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=30)
    snapshot_state(StorageTier="standard", RestoreExpiryTime=soon)
    with pytest.raises(errors.SnapshotArchived, match=r"restored .* only\s+temporarily.*Extend"):
        run(world, {"snapshotId": world.snapshot()})


def test_temporary_restore_long_enough(world: World) -> None:
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
    snapshot_state(StorageTier="standard", RestoreExpiryTime=later)
    assert run(world, {"snapshotId": world.snapshot()})["sourcesReady"] is True


def test_volume_too_large(world: World) -> None:
    snapshot_id = world.snapshot(size=1025)
    with pytest.raises(errors.VolumeTooLarge, match=r"1025 GiB.*MAX_VOLUME_GIB=1024"):
        run(world, {"snapshotId": snapshot_id})


def test_input_key_encrypts_an_unencrypted_source(world: World) -> None:
    key_id = world.kms_key_arn.rsplit("/", 1)[1]
    plan = run(world, {"snapshotId": world.snapshot(), "kmsKeyId": key_id})
    assert plan["kmsKeyId"] == world.kms_key_arn
    assert (plan["volumes"][0]["encrypted"], plan["volumes"][0]["kmsKeyId"]) == (
        True,
        world.kms_key_arn,
    )


def test_encrypted_source_keeps_its_key(world: World) -> None:
    snapshot_id = world.snapshot(encrypted=True)

    # moto leaves KmsKeyId out of snapshots; EC2 gives it for every encrypted one
    def with_key(parsed: dict[str, Any]) -> None:
        for snapshot in parsed["Snapshots"]:
            snapshot["KmsKeyId"] = world.kms_key_arn

    amend(aws.ec2(), "DescribeSnapshots", with_key)
    volume = run(world, {"snapshotId": snapshot_id})["volumes"][0]
    assert (volume["encrypted"], volume["kmsKeyId"]) == (True, world.kms_key_arn)


def test_kms_key_that_does_not_exist(world: World) -> None:
    with pytest.raises(errors.KmsKeyNotUsable, match="does not exist"):
        run(
            world,
            {"snapshotId": world.snapshot(), "kmsKeyId": "00000000-1111-2222-3333-444444444444"},
        )


def test_kms_key_disabled(world: World) -> None:
    # moto's DisableKey takes the key id only
    boto3.client("kms", region_name=REGION).disable_key(KeyId=world.kms_key_arn.rsplit("/", 1)[1])
    with pytest.raises(errors.KmsKeyNotUsable, match="Disabled, not Enabled"):
        run(world, {"snapshotId": world.snapshot(), "kmsKeyId": world.kms_key_arn})


def test_kms_key_access_denied(world: World) -> None:
    respond(aws.kms(), "DescribeKey", lambda _: error_response("AccessDeniedException", "no"))
    with pytest.raises(errors.KmsKeyNotUsable, match=r"not usable by the stack.*kmsKeyArns"):
        run(world, {"snapshotId": world.snapshot(), "kmsKeyId": world.kms_key_arn})


def test_key_of_an_encrypted_source_must_be_usable(world: World) -> None:
    snapshot_id = world.snapshot(encrypted=True)
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [s.update(KmsKeyId=world.kms_key_arn) for s in parsed["Snapshots"]],
    )
    respond(aws.kms(), "DescribeKey", lambda _: error_response("AccessDeniedException", "no"))
    with pytest.raises(errors.KmsKeyNotUsable, match=f"key of snapshot {snapshot_id}"):
        run(world, {"snapshotId": snapshot_id})


def active_restores(count: int) -> None:
    respond(
        aws.ec2(),
        "DescribeFastSnapshotRestores",
        lambda _: {
            "FastSnapshotRestores": [
                {
                    "SnapshotId": f"snap-00000000000000{n:03d}",
                    "AvailabilityZone": az,
                    "State": "enabled",
                }
                for n in range(count)
                for az in ("us-east-1a", "us-east-1b")
            ]
        },
    )


def test_fast_snapshot_restore_within_the_limit(world: World) -> None:
    active_restores(4)
    plan = run(world, {"snapshotId": world.snapshot(), "fastSnapshotRestoreAzs": ["us-east-1b"]})
    assert plan["fastSnapshotRestoreAzs"] == ["us-east-1b"]


def test_fast_snapshot_restore_over_the_limit(world: World) -> None:
    active_restores(4)
    image = source_image(world, volume_count=2)
    serve_image(image)
    with pytest.raises(
        errors.FastSnapshotRestoreLimitExceeded,
        match=r"2 new snapshot\(s\).*limit of 5.*4 already",
    ):
        run(world, {"imageId": SOURCE_IMAGE_ID, "fastSnapshotRestoreAzs": ["us-east-1a"]})


def test_fast_snapshot_restore_refused_over_16_tib(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EBS enables FSR only on snapshots of at most 16 TiB: refuse before hours of copying."""
    monkeypatch.setenv("MAX_VOLUME_GIB", "65536")
    monkeypatch.setenv("INSTANCE_TYPES", "")  # sized by the job: .8xlarge copies 16 TiB in time
    active_restores(0)
    snapshot_id = world.snapshot(size=16385)
    with pytest.raises(
        errors.InvalidInput, match=rf"at most 16384 GiB.*{snapshot_id} \(16385 GiB\)"
    ):
        run(world, {"snapshotId": snapshot_id, "fastSnapshotRestoreAzs": ["us-east-1a"]})
    plan = run(
        world,
        {
            "snapshotId": world.snapshot(size=16384),
            "fastSnapshotRestoreAzs": ["us-east-1a"],
            "verify": False,
        },
    )
    assert plan["volumes"][0]["sizeGiB"] == 16384


def test_image_plan_captures_every_attribute(world: World) -> None:
    image = source_image(world, volume_count=2)
    serve_image(image)
    plan = run(world, {"imageId": SOURCE_IMAGE_ID})
    first, second = (m["Ebs"]["SnapshotId"] for m in image["BlockDeviceMappings"][:2])
    assert plan["source"] == {"kind": "image", "imageId": SOURCE_IMAGE_ID}
    assert plan["imageName"] == f"app-server-2026.11-compact-{EXECUTION}"
    assert [
        (v["index"], v["sourceSnapshotId"], v["deviceName"], v["sizeGiB"]) for v in plan["volumes"]
    ] == [
        (0, first, "/dev/xvda", 8),
        (1, second, "/dev/xvdb", 9),
    ]
    assert plan["image"] == {
        "imageId": SOURCE_IMAGE_ID,
        "name": "app-server-2026.11",
        "description": "app server, hardened",
        "architecture": "arm64",
        "rootDeviceName": "/dev/xvda",
        "virtualizationType": "hvm",
        "bootMode": "uefi",
        "enaSupport": True,
        "sriovNetSupport": "simple",
        "tpmSupport": "v2.0",
        "uefiData": UEFI_DATA,
        "imdsSupport": "v2.0",
        "kernelId": None,
        "ramdiskId": None,
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "snapshotId": first,
                    "volumeSize": 8,
                    "volumeType": "gp3",
                    "iops": 4000,
                    "throughput": 250,
                    "deleteOnTermination": True,
                    "encrypted": False,
                },
            },
            {
                "deviceName": "/dev/xvdb",
                "ebs": {
                    "snapshotId": second,
                    "volumeSize": 9,
                    "volumeType": "gp2",
                    "deleteOnTermination": False,
                    "encrypted": False,
                },
            },
            {"deviceName": "/dev/sdx", "virtualName": "ephemeral0"},
            {"deviceName": "/dev/sdy", "noDevice": ""},
        ],
        "tags": {"team": "web"},
        "platformDetails": "Linux/UNIX",
        "usageOperation": "RunInstances",
        "productCodes": [],
        "deprecationTime": None,
    }


def test_image_with_instance_store_root(world: World) -> None:
    serve_image(source_image(world, volume_count=1, RootDeviceType="instance-store"))
    with pytest.raises(errors.UnsupportedImage, match="instance-store root"):
        run(world, {"imageId": SOURCE_IMAGE_ID})


def test_image_not_available(world: World) -> None:
    serve_image(source_image(world, volume_count=1, State="pending"))
    with pytest.raises(errors.UnsupportedImage, match="is pending, not available"):
        run(world, {"imageId": SOURCE_IMAGE_ID})


def test_image_with_too_many_volumes(world: World) -> None:
    serve_image(source_image(world, volume_count=11))
    with pytest.raises(errors.TooManyVolumes, match=r"11 EBS volumes.*at most 10"):
        run(world, {"imageId": SOURCE_IMAGE_ID})


def test_image_not_found(world: World) -> None:
    with pytest.raises(errors.ImageNotFound, match="ami-0123456789abcdef0 not found in us-east-1"):
        run(world, {"imageId": "ami-0123456789abcdef0"})


def test_image_name_already_taken(world: World) -> None:
    serve_image(source_image(world))
    boto3.client("ec2", region_name=REGION).register_image(Name="taken-name")
    with pytest.raises(errors.InvalidInput, match="'taken-name' already exists"):
        run(world, {"imageId": SOURCE_IMAGE_ID, "imageName": "taken-name"})


def test_prepare_creates_nothing_and_leaves_the_source_alone(world: World) -> None:
    image = source_image(world)
    serve_image(image)
    snapshot_id = world.snapshot(tags={"team": "db"})
    before = world.inventory()
    described = world.ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"]
    run(world, {"snapshotId": snapshot_id, "fastSnapshotRestoreAzs": []})
    run(world, {"imageId": SOURCE_IMAGE_ID})
    assert world.inventory() == before
    assert world.ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"] == described


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (
            {"PlatformDetails": "Windows", "UsageOperation": "RunInstances:0002"},
            r"bills as Windows \(UsageOperation RunInstances:0002, not RunInstances\)",
        ),
        (
            {"PlatformDetails": "Red Hat Enterprise Linux", "UsageOperation": "RunInstances:0010"},
            "UsageOperation RunInstances:0010",
        ),
        (
            {"ProductCodes": [{"ProductCodeId": "abc123", "ProductCodeType": "marketplace"}]},
            "product codes abc123",
        ),
        ({"Platform": "windows"}, r"Windows AMI \(Platform windows\)"),
    ],
)
def test_paid_or_windows_image_is_refused_before_anything_is_created(
    world: World, overrides: dict[str, Any], why: str
) -> None:
    serve_image(source_image(world, **overrides))
    before = world.inventory()
    with pytest.raises(errors.UnsupportedImage) as caught:
        run(world, {"imageId": SOURCE_IMAGE_ID})
    message = str(caught.value)
    assert re.search(why, message), message
    assert "would register as Linux/UNIX" in message
    assert "Compact its data volumes as snapshots instead" in message
    assert world.inventory() == before


OTHER_ACCOUNT_KEY = "arn:aws:kms:us-east-1:111122223333:key/0f0e0d0c-0b0a-0908-0706-050403020100"


def encrypted_with(world: World, key_arn: str) -> str:
    """An encrypted source snapshot whose key is key_arn (DescribeKey answers for it)."""
    snapshot_id = world.snapshot(encrypted=True)
    snapshot_state(KmsKeyId=key_arn, Encrypted=True)
    respond(
        aws.kms(),
        "DescribeKey",
        lambda params: (
            {
                "KeyMetadata": {
                    "KeyId": key_arn.rsplit("/", 1)[1],
                    "Arn": key_arn,
                    "AWSAccountId": key_arn.split(":")[4],
                    "Enabled": True,
                    "KeyState": "Enabled",
                    "KeyUsage": "ENCRYPT_DECRYPT",
                    "KeySpec": "SYMMETRIC_DEFAULT",
                }
            }
            if params["KeyId"] == key_arn
            else None
        ),
    )
    return snapshot_id


def test_other_account_key_is_replaced_by_the_default_ebs_key(world: World) -> None:
    snapshot_id = encrypted_with(world, OTHER_ACCOUNT_KEY)
    plan = run(world, {"snapshotId": snapshot_id})
    volume = plan["volumes"][0]
    assert volume["encrypted"] is True
    assert (volume["targetKmsKeyId"], volume["kmsKeyId"]) == (None, None)
    assert volume["sourceKmsKeyId"] == OTHER_ACCOUNT_KEY
    assert len(plan["notes"]) == 1
    assert "this account's default EBS key" in plan["notes"][0]
    assert "belongs to account 111122223333" in plan["notes"][0]


def test_other_account_key_is_replaced_by_the_input_key(world: World) -> None:
    snapshot_id = encrypted_with(world, OTHER_ACCOUNT_KEY)
    plan = run(world, {"snapshotId": snapshot_id, "kmsKeyId": world.kms_key_arn})
    volume = plan["volumes"][0]
    assert (volume["encrypted"], volume["targetKmsKeyId"]) == (True, world.kms_key_arn)
    assert f"encrypted with KMS key {world.kms_key_arn}" in plan["notes"][0]


def test_own_account_key_is_kept_without_a_note(world: World) -> None:
    own_key = OTHER_ACCOUNT_KEY.replace("111122223333", "123456789012")
    plan = run(world, {"snapshotId": encrypted_with(world, own_key)})
    assert plan["volumes"][0]["targetKmsKeyId"] == own_key
    assert plan["notes"] == []


def test_this_account_comes_from_the_function_arn(world: World) -> None:
    """The Lambda's own ARN names this account: the same key is "other" for another account."""
    snapshot_id = encrypted_with(world, OTHER_ACCOUNT_KEY)
    world.context.invoked_function_arn = (
        "arn:aws:lambda:us-east-1:111122223333:function:compactor-test"
    )
    plan = run(world, {"snapshotId": snapshot_id})
    assert (plan["volumes"][0]["targetKmsKeyId"], plan["notes"]) == (OTHER_ACCOUNT_KEY, [])


def test_instance_types_by_job_size(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTANCE_TYPES", "")
    small = run(world, {"snapshotId": world.snapshot(size=100)})
    assert small["instanceTypes"] == ["m7i.large", "m6i.large", "c6i.large", "m5.large"]
    big = run(world, {"snapshotId": world.snapshot(size=1000)})
    assert big["instanceTypes"][0] == "m7i.2xlarge"
    monkeypatch.setenv("ARCHITECTURE", "arm64")
    assert run(world, {"snapshotId": world.snapshot(size=100)})["instanceTypes"][0] == "m7g.large"


def test_job_too_large_is_refused_up_front(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_MACHINE_TIMEOUT_MINUTES", "180")
    snapshot_id = world.snapshot(size=200)
    before = world.inventory()
    with pytest.raises(
        errors.JobTooLarge,
        match=r"copying 200 GiB and verifying it on m7i.large.*"
        r"stateMachineTimeoutMinutes to at least \d+",
    ):
        run(world, {"snapshotId": snapshot_id})
    assert world.inventory() == before
