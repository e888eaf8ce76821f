"""prepare against the emulator: each bad input of twin/bad_inputs.py is refused with its own
error and creates nothing; a pending source gives sourcesReady false until it completes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twin.bad_inputs import cases
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator

GIB = 1024**3


@pytest.fixture(scope="module")
def compactor_modules() -> Any:
    from compactor import aws, errors, planning
    from compactor.config import Config

    return aws, errors, planning, Config


@pytest.fixture
def emu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compactor_modules: Any
) -> Iterator[Emulator]:
    aws, *_ = compactor_modules
    with Emulator(tmp_path / "emu", Faults()) as emulator:
        for name, value in emulator.client_env().items():
            monkeypatch.setenv(name, value)
        aws.reset_clients()
        yield emulator
        aws.reset_clients()


def disk(tmp_path: Path) -> Path:
    path = tmp_path / "source.img"
    with open(path, "wb") as f:
        f.truncate(GIB)
        f.write(b"source data")
    return path


def config(emu: Emulator, compactor_modules: Any) -> Any:
    *_, Config = compactor_modules
    return Config.from_env(
        {
            "STACK_NAME": "twin-refusals",
            "SUBNET_IDS": "subnet-0123456789abcdef0",
            "LAUNCH_TEMPLATE_ID": "lt-0123456789abcdef0",
            "INSTANCE_TYPES": "",
            "ALLOW_ON_DEMAND": "true",
            "SOURCE_VOLUME_IOPS": "3000",
            "SOURCE_VOLUME_THROUGHPUT": "125",
            "VOLUME_INITIALIZATION_RATE": "0",
            "MAX_VOLUME_GIB": "16384",
            "DOCUMENT_NAME": "twin-refusals-CompactVolumes",
            "SOURCE_BLOCKS_BUCKET": "twin-refusals-sourceblocks",
            "BATCH_RESULTS_BUCKET": "twin-refusals-batchresults",
            "PROGRAM_BUCKET": "cdk-hnb659fds-assets-123456789012-us-east-1",
            "PROGRAM_KEY": "0123abcd.pyz",
            "COMMAND_LOG_GROUP": "/twin-refusals/commands",
            "EVENT_BUS_NAME": "default",
            "TRIGGER_TAG_KEY": "compact",
            "ROOT_DEVICE_NAME": "/dev/xvda",
            "ROOT_VOLUME_GIB": "8",
            "ARCHITECTURE": "x86_64",
            "STATE_MACHINE_TIMEOUT_MINUTES": "2880",
            "COMPACTION_POLL_SECONDS": "60",
        }
    )


def inventory(emu: Emulator) -> dict[str, set[str]]:
    ec2 = emu.boto3_client("ec2")
    return {
        "instances": {
            i["InstanceId"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        },
        "volumes": {v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]},
        "snapshots": {
            s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]
        },
        "images": {i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]},
    }


def test_every_bad_input_is_refused_with_its_error_and_creates_nothing(
    emu: Emulator, tmp_path: Path, compactor_modules: Any
) -> None:
    _, errors, planning, _ = compactor_modules
    rows = cases(emu, disk(tmp_path))
    assert len(rows) == 6
    before = inventory(emu)
    for name, execution_input, expected in rows:
        with pytest.raises(errors.CompactorError) as caught:
            planning.plan(execution_input, "refusal", config(emu, compactor_modules), emu.account)
        assert type(caught.value).__name__ == expected, (name, caught.value)
        assert inventory(emu) == before, name
    # the reasons reach the user
    messages = {}
    for name, execution_input, _ in rows:
        try:
            planning.plan(execution_input, "refusal", config(emu, compactor_modules), emu.account)
        except errors.CompactorError as error:
            messages[name] = str(error)
    assert "RestoreSnapshotTier" in messages["archived snapshot"]
    assert "2026-01-01" in messages["archived snapshot"]
    assert "RunInstances:0002" in messages["paid AMI (Windows, RunInstances:0002)"]
    assert "cynhm1j9d2839l7ehzmnes1u3" in messages["AMI with product codes"]
    assert "twin: the snapshot could not be completed" in messages["snapshot in state error"]


def test_pending_source_is_not_ready_until_it_completes(
    emu: Emulator, tmp_path: Path, compactor_modules: Any
) -> None:
    _, _, planning, _ = compactor_modules
    snapshot_id = emu.register_snapshot(disk(tmp_path), "fresh", state="pending", completes=True)
    # (every DescribeSnapshots advances the emulator's pending snapshots: plan first)
    first = planning.plan(
        {"snapshotId": snapshot_id}, "pending", config(emu, compactor_modules), emu.account
    )
    before = inventory(emu)
    assert (first["sourcesReady"], first["pendingSnapshotIds"]) == (False, [snapshot_id])
    # the whole volume while FullSnapshotSizeInBytes is unknown, else what it holds
    size = first["volumes"][0]["sourceFullSizeBytes"]
    assert first["bytesToCopy"] == (GIB if size is None else size)
    for _ in range(20):
        plan = planning.plan(
            {"snapshotId": snapshot_id}, "pending", config(emu, compactor_modules), emu.account
        )
        if plan["sourcesReady"]:
            break
    else:
        raise AssertionError("the pending snapshot never completed in the emulator")
    assert plan["pendingSnapshotIds"] == []
    # the completed snapshot's written size: one 512 KiB chunk
    assert plan["bytesToCopy"] == plan["volumes"][0]["sourceFullSizeBytes"] < GIB
    assert plan["instanceTypes"][0] == "m7i.large"
    assert inventory(emu) == before


def test_other_account_key_is_rendered(emu: Emulator, tmp_path: Path) -> None:
    key = "arn:aws:kms:us-east-1:111122223333:key/0f0e0d0c-0b0a-0908-0706-050403020100"
    snapshot_id = emu.register_snapshot(disk(tmp_path), "shared", kms_key_id=key)
    described = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][
        0
    ]
    assert (described["Encrypted"], described["KmsKeyId"]) == (True, key)
