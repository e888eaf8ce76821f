"""The transfer instance boots from whichever disk present at launch carries its AMI's root
filesystem UUID (issue 7 item 1): the twin's AL2023 transfer AMI and the demo's source AMI come
from the same base, so mapping a source volume at launch makes the instance boot from the user's
disk, and the real `sparsecopy device` refuses the volume; attaching it after boot is safe."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twin_helpers import shell_document
from twin_helpers import wait_invocation as _wait_invocation

from devkit.pytest_ci import require_root
from twin import disks
from twin.emulator import boot
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "ssm-documents" / "sparsecopy"

DOCUMENT = shell_document(
    "the data-plane program's device lookup, as the Command document runs it",
    {
        "VolumeId": {"type": "String", "allowedPattern": "^vol-[0-9a-f]+$"},
        "Sleep": {"type": "String", "default": "0"},
    },
    [
        "set -eu",
        "sleep {{ Sleep }}",
        f"{sys.executable} -I -S {PROGRAM} device {{{{ VolumeId }}}}",
    ],
)


@pytest.fixture(scope="module")
def golden_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root disk of a golden image built from the AL2023 base (same root UUID)."""
    require_root()
    path = tmp_path_factory.mktemp("golden") / "root.img"
    disks.build("ext4", path, seed=7, root_uuid=boot.AL2023_ROOT_UUID)
    return path


@pytest.fixture
def emulator(tmp_path: Path, root_only: None) -> Iterator[Emulator]:
    with Emulator(tmp_path / "emu", Faults()) as emu:
        yield emu
        assert _released(emu) == {}
    assert not _mounts_under(tmp_path)


def _released(emu: Emulator) -> dict[str, Path]:
    """The loop devices still attached once the run's thread has let them go (it reports the
    end before it releases them)."""
    deadline = time.monotonic() + 10
    while emu.state.loops.attached and time.monotonic() < deadline:
        time.sleep(0.05)
    return dict(emu.state.loops.attached)


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(str(path))]


def _launch(ec2: Any, image_id: str, source_snapshot: str | None) -> str:
    mappings: list[dict[str, Any]] = [
        {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 2, "VolumeType": "gp3"}},
        {"DeviceName": "/dev/sdp", "Ebs": {"VolumeSize": 1, "VolumeType": "gp3"}},
    ]
    if source_snapshot is not None:  # the old launch: the source mapped at launch
        mappings.append({"DeviceName": "/dev/sdf", "Ebs": {"SnapshotId": source_snapshot}})
    for mapping in mappings:
        mapping["Ebs"]["DeleteOnTermination"] = True
    return str(
        ec2.run_instances(
            ImageId=image_id,
            MinCount=1,
            MaxCount=1,
            InstanceType="m6i.large",
            Placement={"AvailabilityZone": "us-east-1a"},
            BlockDeviceMappings=mappings,
        )["Instances"][0]["InstanceId"]
    )


def _volumes(ec2: Any, instance_id: str) -> dict[str, str]:
    (instance,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    return {m["DeviceName"]: m["Ebs"]["VolumeId"] for m in instance["BlockDeviceMappings"]}


def _send(ssm: Any, instance_id: str, volume_id: str, sleep: str = "0") -> str:
    if "twin-boot-doc" not in [d["Name"] for d in ssm.list_documents()["DocumentIdentifiers"]]:
        ssm.create_document(
            Content=json.dumps(DOCUMENT), Name="twin-boot-doc", DocumentType="Command"
        )
    return str(
        ssm.send_command(
            DocumentName="twin-boot-doc",
            InstanceIds=[instance_id],
            Parameters={"VolumeId": [volume_id], "Sleep": [sleep]},
        )["Command"]["CommandId"]
    )


def test_the_transfer_ami_is_the_al2023_parameter_and_carries_the_base_root_uuid(
    emulator: Emulator,
) -> None:
    image_id = emulator.transfer_image()
    assert emulator.transfer_image() == image_id  # built once
    ssm, ec2 = emulator.boto3_client("ssm"), emulator.boto3_client("ec2")
    value = ssm.get_parameter(Name=boot.TRANSFER_AMI_PARAMETER)["Parameter"]["Value"]
    assert value == image_id
    (image,) = ec2.describe_images(ImageIds=[image_id])["Images"]
    assert image["ImageOwnerAlias"] == "amazon"
    assert image["RootDeviceName"] == boot.ROOT_DEVICE_NAME
    root_snapshot = image["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]
    assert boot.root_uuid(emulator.snapshot_file(root_snapshot)) == boot.AL2023_ROOT_UUID
    assert image_id not in emulator.state.images_created  # set-up, not the workflow's


def test_filesystem_uuids_are_read_from_the_partition_table(golden_root: Path) -> None:
    found = {(fs.fstype, fs.uuid) for fs in boot.filesystems(golden_root)}
    assert ("ext4", boot.AL2023_ROOT_UUID) in found
    assert boot.root_uuid(golden_root) == boot.AL2023_ROOT_UUID


def test_source_mapped_at_launch_is_booted_and_sparsecopy_refuses_it(
    emulator: Emulator, golden_root: Path
) -> None:
    source = emulator.register_snapshot(golden_root, "golden image root")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    image_id = emulator.transfer_image()
    instance_id = _launch(ec2, image_id, source)
    volumes = _volumes(ec2, instance_id)
    (root,) = ec2.describe_volumes(VolumeIds=[volumes["/dev/xvda"]])["Volumes"]
    image = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    # EC2 merges the AMI's root snapshot into a root mapping that names none
    assert root["SnapshotId"] == image["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]
    booted = emulator.ec2.get_instance(instance_id).twin_boot_disk
    assert (booted.volume_id, booted.device_name) == (volumes["/dev/sdf"], "/dev/sdf")

    inv = _wait_invocation(ssm, _send(ssm, instance_id, volumes["/dev/sdf"]), instance_id)
    assert inv["Status"] == "Failed"
    assert "is mounted" in inv["StandardOutputContent"] + inv["StandardErrorContent"], inv
    assert _released(emulator) == {}
    # its own blank target is not in use
    inv = _wait_invocation(ssm, _send(ssm, instance_id, volumes["/dev/sdp"]), instance_id)
    assert inv["Status"] == "Success", inv["StandardErrorContent"]


def test_source_attached_after_boot_is_usable(emulator: Emulator, golden_root: Path) -> None:
    source = emulator.register_snapshot(golden_root, "golden image root")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    instance_id = _launch(ec2, emulator.transfer_image(), None)
    volume_id = ec2.create_volume(SnapshotId=source, AvailabilityZone="us-east-1a")["VolumeId"]
    while ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"] == "creating":
        pass
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert getattr(emulator.ec2.get_instance(instance_id), "twin_boot_disk", None) is None
    inv = _wait_invocation(ssm, _send(ssm, instance_id, volume_id), instance_id)
    assert inv["Status"] == "Success", inv["StandardOutputContent"] + inv["StandardErrorContent"]
    assert inv["StandardOutputContent"].strip().startswith("/dev/loop")
    assert _released(emulator) == {}


def test_a_stock_ami_boots_its_own_root(emulator: Emulator, golden_root: Path) -> None:
    """An AMI whose root snapshot the twin does not hold (moto's stock AMIs): no UUID to look
    for, the instance never boots from a mapped volume."""
    source = emulator.register_snapshot(golden_root, "golden image root")
    ec2 = emulator.boto3_client("ec2")
    instance_id = _launch(ec2, "ami-12c6146b", source)
    assert getattr(emulator.ec2.get_instance(instance_id), "twin_boot_disk", None) is None


def test_the_user_root_is_unmounted_when_the_instance_is_lost(
    emulator: Emulator, golden_root: Path, tmp_path: Path
) -> None:
    source = emulator.register_snapshot(golden_root, "golden image root")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    instance_id = _launch(ec2, emulator.transfer_image(), source)
    _send(ssm, instance_id, _volumes(ec2, instance_id)["/dev/sdf"], sleep="30")
    deadline = time.monotonic() + 10
    while not [m for m in _mounts_under(tmp_path) if m.endswith("instance-root")]:
        assert time.monotonic() < deadline, "the user's root was never mounted"
        time.sleep(0.05)
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert not _mounts_under(tmp_path)
    assert _released(emulator) == {}


def test_the_old_launch_of_the_demo_ami_through_the_stack_template_boots_the_users_disk(
    emulator: Emulator, tmp_path: Path, cdk_out: Path
) -> None:
    """The bug of item 1 as the twin now shows it: the synthesized stack's launch template (its
    resolve:ssm: AL2023 image) and the demo's source AMI (make demo INPUT=ami), launched the old
    way (source snapshots mapped at launch): the instance boots from the source root, and the real
    sparsecopy refuses it, which the document reported as CompactionFailed."""
    from twin.deploy import deploy
    from twin.options import Options
    from twin.source import register

    d = deploy(emulator, cdk_out)
    ((template_id),) = [v for v in d.physical.values() if str(v).startswith("lt-")]
    source = register(emulator, Options(input="ami"), tmp_path / "work")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    assert emulator.state.transfer_image_id is not None
    old_mappings = [
        {"DeviceName": f"/dev/sd{letter}", "Ebs": {"SnapshotId": sid, "DeleteOnTermination": True}}
        for letter, sid in zip("fg", source.snapshot_ids, strict=True)
    ] + [
        {"DeviceName": f"/dev/sd{letter}", "Ebs": {"VolumeSize": 1, "DeleteOnTermination": True}}
        for letter in "pq"
    ]
    instance_id = ec2.run_instances(
        LaunchTemplate={"LaunchTemplateId": template_id},
        MinCount=1,
        MaxCount=1,
        BlockDeviceMappings=old_mappings,
    )["Instances"][0]["InstanceId"]
    (described,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    assert described["ImageId"] == emulator.state.transfer_image_id
    volumes = _volumes(ec2, instance_id)
    booted = emulator.ec2.get_instance(instance_id).twin_boot_disk
    assert booted.volume_id == volumes["/dev/sdf"]  # the source AMI's root
    inv = _wait_invocation(ssm, _send(ssm, instance_id, volumes["/dev/sdf"]), instance_id)
    assert inv["Status"] == "Failed"
    assert "is mounted" in inv["StandardOutputContent"] + inv["StandardErrorContent"], inv
    ec2.terminate_instances(InstanceIds=[instance_id])
