"""A moto account with what the stack would have made: a VPC with two subnets in two AZs, the
launch template, the Command document, a KMS key; and the Lambda environment pointing at them."""

from __future__ import annotations

import bisect
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from compactor import aws, contract
from moto import mock_aws
from support import FakeLambdaContext, checked_handler, respond

from twin.runner.moto_kms import share_one_symmetric_private_key
from twin.runner.shared_loader import share_one_loader

# One botocore data loader for every session the tests make. Each test's mock_aws gets fresh
# clients (aws.reset_clients), and each new session would parse the service models again (EC2's
# is megabytes of JSON): a third of this suite's time, measured with cProfile on test_teardown.
share_one_loader()
# moto's KMS: one RSA key for every symmetric key (twin/runner/moto_kms.py says why)
share_one_symmetric_private_key()

REGION = "us-east-1"
STACK = "compactor-test"
EXECUTION = "exec-1"
TRIGGER_TAG = "compact"
BUCKET = "compactor-test-source-blocks"
BATCH_BUCKET = "compactor-test-batch-results"
# the data-plane program's file asset (the CDK bootstrap bucket, lib/command-document.ts)
PROGRAM_BUCKET = "cdk-hnb659fds-assets-123456789012-us-east-1"
PROGRAM_KEY = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.pyz"
DOCUMENT = "compactor-test-CompactVolumes"
DOCUMENT_YAML = """
schemaVersion: '2.2'
description: test stand-in for ssm-documents/compact-volumes.yaml
parameters:
  SourceVolumeIds: {type: String}
  TargetVolumeIds: {type: String}
  SourceDeviceNames: {type: String}
  TargetDeviceNames: {type: String}
  Method: {type: String, allowedValues: [allocated, trim]}
  Jobs: {type: String}
  Verify: {type: String, allowedValues: ['true', 'false']}
  SourceBlocksUrl: {type: String, default: ''}
  ProgramUrl: {type: String}
  TimeoutSeconds: {type: String, default: '172800'}
mainSteps:
  - action: aws:runShellScript
    name: compact
    inputs:
      runCommand: ['true']
"""


@dataclass
class World:
    env: dict[str, str]
    subnets: list[str]
    azs: list[str]
    launch_template_id: str
    kms_key_arn: str
    base_image_id: str
    ec2: Any = field(repr=False)
    context: FakeLambdaContext = field(default_factory=FakeLambdaContext)

    def snapshot(
        self,
        size: int = 8,
        tags: dict[str, str] | None = None,
        description: str = "nightly backup of db",
        encrypted: bool = False,
    ) -> str:
        """A completed source snapshot, as a user would have it."""
        volume_args: dict[str, Any] = {"Size": size, "AvailabilityZone": self.azs[0]}
        if encrypted:
            volume_args.update(Encrypted=True, KmsKeyId=self.kms_key_arn)
        volume_id = self.ec2.create_volume(**volume_args)["VolumeId"]
        spec = [
            {
                "ResourceType": "snapshot",
                "Tags": [{"Key": k, "Value": v} for k, v in (tags or {}).items()],
            }
        ]
        snapshot_id = self.ec2.create_snapshot(
            VolumeId=volume_id,
            Description=description,
            **({"TagSpecifications": spec} if tags else {}),
        )["SnapshotId"]
        self.ec2.delete_volume(VolumeId=volume_id)
        return str(snapshot_id)

    def inventory(self) -> dict[str, set[str]]:
        """Everything in the account that a workflow could have created."""
        instances = {
            i["InstanceId"]
            for r in self.ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        }
        return {
            "instances": instances,
            "volumes": {v["VolumeId"] for v in self.ec2.describe_volumes()["Volumes"]},
            "snapshots": {
                s["SnapshotId"] for s in self.ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]
            },
            "images": {i["ImageId"] for i in self.ec2.describe_images(Owners=["self"])["Images"]},
        }


@pytest.fixture(autouse=True)
def _results_follow_the_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every handler result any test gets satisfies its contract/schemas/results schema."""
    for module in contract.task_modules():
        imported = importlib.import_module(f"compactor.handlers.{module}")
        monkeypatch.setattr(imported, "handler", checked_handler(module, imported.handler))


@pytest.fixture(autouse=True)
def _lambda_process_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "compactor-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "CompactorTest")
    monkeypatch.setenv("LOG_LEVEL", "WARNING")
    # moto's catalogue of public AMIs takes seconds to load per test and is not needed
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    aws.reset_clients()
    yield
    aws.reset_clients()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with mock_aws():
        aws.reset_clients()
        # the package's own clients: a boto3 EC2 client takes ~0.5 s to build
        ec2 = aws.ec2()
        vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        azs = [f"{REGION}a", f"{REGION}b"]
        subnets = [
            ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=az)[
                "Subnet"
            ]["SubnetId"]
            for n, az in enumerate(azs)
        ]
        base_image_id = ec2.register_image(Name="al2023-stand-in")["ImageId"]
        launch_template_id = ec2.create_launch_template(
            LaunchTemplateName=f"{STACK}-transfer",
            LaunchTemplateData={"ImageId": base_image_id},
        )["LaunchTemplate"]["LaunchTemplateId"]
        aws.ssm().create_document(
            Name=DOCUMENT, DocumentType="Command", DocumentFormat="YAML", Content=DOCUMENT_YAML
        )
        kms_key_arn = aws.kms().create_key()["KeyMetadata"]["Arn"]
        aws.s3().create_bucket(Bucket=BUCKET)
        aws.s3().create_bucket(Bucket=BATCH_BUCKET)
        env = {
            "STACK_NAME": STACK,
            "SUBNET_IDS": ",".join(subnets),
            "LAUNCH_TEMPLATE_ID": launch_template_id,
            "INSTANCE_TYPES": "m7i.large,m6i.large",
            "ALLOW_ON_DEMAND": "true",
            "SOURCE_VOLUME_IOPS": "6000",
            "SOURCE_VOLUME_THROUGHPUT": "500",
            "VOLUME_INITIALIZATION_RATE": "200",
            "MAX_VOLUME_GIB": "1024",
            "DOCUMENT_NAME": DOCUMENT,
            "COMMAND_LOG_GROUP": "/compactor-test/commands",
            "EVENT_BUS_NAME": "default",
            "TRIGGER_TAG_KEY": TRIGGER_TAG,
            "ROOT_DEVICE_NAME": "/dev/xvda",
            "ROOT_VOLUME_GIB": "8",
            "ARCHITECTURE": "x86_64",
            "STATE_MACHINE_TIMEOUT_MINUTES": "2880",
            "COMPACTION_POLL_SECONDS": "120",
            "SOURCE_BLOCKS_BUCKET": BUCKET,
            "BATCH_RESULTS_BUCKET": BATCH_BUCKET,
            "PROGRAM_BUCKET": PROGRAM_BUCKET,
            "PROGRAM_KEY": PROGRAM_KEY,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield World(
            env=env,
            subnets=subnets,
            azs=azs,
            launch_template_id=launch_template_id,
            kms_key_arn=kms_key_arn,
            base_image_id=base_image_id,
            ec2=ec2,
        )


SOURCE_IMAGE_ID = "ami-0a1b2c3d4e5f60718"
UEFI_DATA = "QU1aTlVFRkkAAAAAAAAAAAAAAAA="


def source_image(world: World, volume_count: int = 2, **overrides: Any) -> dict[str, Any]:
    """A source AMI as DescribeImages describes it, on real (moto) snapshots, with every attribute
    RegisterImage takes, an ephemeral and a suppressed mapping, and tags to filter. moto cannot
    register such an AMI, so serve_image() answers DescribeImages for it."""
    mappings: list[dict[str, Any]] = []
    for index in range(volume_count):
        mappings.append(
            {
                "DeviceName": "/dev/xvda" if index == 0 else f"/dev/xvd{chr(ord('b') + index - 1)}",
                "Ebs": {
                    "SnapshotId": world.snapshot(size=8 + index, description=f"vol {index}"),
                    "VolumeSize": 8 + index,
                    "VolumeType": "gp3" if index == 0 else "gp2",
                    "DeleteOnTermination": index == 0,
                    "Encrypted": False,
                    **({"Iops": 4000, "Throughput": 250} if index == 0 else {}),
                },
            }
        )
    mappings.append({"DeviceName": "/dev/sdx", "VirtualName": "ephemeral0"})
    mappings.append({"DeviceName": "/dev/sdy", "NoDevice": ""})
    image: dict[str, Any] = {
        "ImageId": SOURCE_IMAGE_ID,
        "Name": "app-server-2026.11",
        "Description": "app server, hardened",
        "State": "available",
        "OwnerId": "123456789012",
        "Public": False,
        "ImageType": "machine",
        "Architecture": "arm64",
        "RootDeviceName": "/dev/xvda",
        "RootDeviceType": "ebs",
        "VirtualizationType": "hvm",
        "Hypervisor": "xen",
        "BootMode": "uefi",
        "EnaSupport": True,
        "SriovNetSupport": "simple",
        "TpmSupport": "v2.0",
        "ImdsSupport": "v2.0",
        "PlatformDetails": "Linux/UNIX",
        "UsageOperation": "RunInstances",
        "BlockDeviceMappings": mappings,
        "Tags": [
            {"Key": "team", "Value": "web"},
            {"Key": "aws:cloudformation:stack-name", "Value": "images"},
            {"Key": TRIGGER_TAG, "Value": "yes"},
        ],
    }
    image.update(overrides)
    return image


def serve_image(image: dict[str, Any], uefi_data: str | None = UEFI_DATA) -> None:
    """Answer DescribeImages(ImageIds=[the image]) and DescribeImageAttribute(uefiData) for it;
    every other call goes to moto."""
    ec2 = aws.ec2()
    respond(
        ec2,
        "DescribeImages",
        lambda params: (
            {"Images": [image]} if params.get("ImageIds") == [image["ImageId"]] else None
        ),
    )
    respond(
        ec2,
        "DescribeImageAttribute",
        lambda params: {
            "ImageId": params["ImageId"],
            "UefiData": {"Value": uefi_data} if uefi_data else {},
        },
    )


def plan_and_launch(
    world: World, execution_input: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    from compactor.handlers import launch, prepare

    # these helpers' callers test the target-volume path unless their input says otherwise
    execution_input = {"target": "volume", **execution_input}
    plan = prepare.handler({"input": execution_input, "executionName": EXECUTION}, world.context)
    instance = launch.handler({"plan": plan, "launchAttempt": 1}, world.context)
    return plan, instance


def ssm_ping(status: str | None) -> list[dict[str, Any]]:
    """DescribeInstanceInformation (not in moto) answers with this ping status for any instance."""
    return respond(
        aws.ssm(),
        "DescribeInstanceInformation",
        lambda params: {
            "InstanceInformationList": []
            if status is None
            else [{"InstanceId": params["Filters"][0]["Values"][0], "PingStatus": status}]
        },
    )


def ready_instance(
    world: World, execution_input: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Prepared, launched, online, and its source volumes attached: returns (plan, instance,
    attached), attached being attach_volumes' result ({"done", "volumes", "waitingFor"})."""
    from compactor.handlers import attach_volumes, check_instance

    plan, instance = plan_and_launch(world, execution_input)
    ssm_ping("Online")
    ready = check_instance.handler({"plan": plan, "instance": instance}, world.context)
    assert ready["ready"], ready
    for _ in range(5):
        attached = attach_volumes.handler({"plan": plan, "instance": instance}, world.context)
        if attached["done"]:
            return plan, instance, attached
    raise AssertionError(f"volumes not attached: {attached}")


def serve_snapshot_blocks(
    blocks: dict[str, list[int]], volume_gib: int = 8, page: int = 10_000
) -> list[dict[str, Any]]:
    """Answer ListSnapshotBlocks for EC2 snapshots (moto's EBS backend knows only snapshots made
    with its own StartSnapshot), `page` blocks at a time, as EBS does: ascending indexes, a
    NextToken while more remain. Returns the calls' parameters."""
    from support import error_response

    blocks = {snapshot: sorted(indexes) for snapshot, indexes in blocks.items()}

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        indexes = blocks.get(params["SnapshotId"])
        if indexes is None:
            return error_response("ResourceNotFoundException", "The snapshot does not exist.")
        first = int(params["NextToken"]) if params.get("NextToken") else 0
        first = max(first, int(params.get("StartingBlockIndex", 0)))
        at = bisect.bisect_left(indexes, first)
        chosen = indexes[at : at + page]
        more = at + page < len(indexes)
        result: dict[str, Any] = {
            "Blocks": [{"BlockIndex": i, "BlockToken": "token"} for i in chosen],
            "BlockSize": 524_288,
            "VolumeSize": volume_gib,
        }
        if more:
            result["NextToken"] = str(chosen[-1] + 1)
        return result

    return respond(aws.ebs(), "ListSnapshotBlocks", answer)


def listed_blocks(world: World, plan: dict[str, Any]) -> dict[str, Any]:
    """list_source_blocks called as the workflow's poll loop does, until complete."""
    from compactor.handlers import list_source_blocks

    listed: dict[str, Any] | None = None
    for _ in range(10):
        listed = dict(
            list_source_blocks.handler({"plan": plan, "sourceBlocks": listed}, world.context)
        )
        if listed["complete"]:
            return listed
    raise AssertionError(f"block lists not complete: {listed}")
