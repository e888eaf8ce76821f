"""launch: RunInstances of the transfer instance with its root and the blank target volumes.

The source volumes are NOT mapped at launch: a source disk from the same base image as the
transfer AMI carries the same root filesystem UUID, and the instance could boot from it.
attach_volumes creates and attaches them once the instance is online (compactor/ec2/attach.py).

Spot is tried first in every (instance type x subnet) pool, then On-Demand in the same pools when
ALLOW_ON_DEMAND is true. A capacity error moves on to the next pool; any other error is raised."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.config import (
    GP3_MAX_IOPS_PER_GIB,
    GP3_MAX_SIZE_GIB,
    GP3_MIB_PER_IOPS,
    GP3_MIN_IOPS,
    Config,
)
from compactor.errors import NoCapacity, NoSpotCapacity
from compactor.models import FailedPool, InstanceResult, Market, Plan
from compactor.observability import MARKETS, emit, logger
from compactor.volumes import has_target_volumes, target_device

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import (
        BlockDeviceMappingTypeDef,
        EbsBlockDeviceTypeDef,
        RunInstancesRequestTypeDef,
    )

# The launch template's version that RunInstances uses: every stack update adds a version and
# the stack is the only writer, so the newest is the stack's current one.
LAUNCH_TEMPLATE_VERSION = "$Latest"

QUOTA_ERRORS = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded"})
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacityOnHost",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
        "InsufficientFreeAddressesInSubnet",
        "InsufficientVolumeCapacity",
        # the account's On-Demand quota (vCPUs per instance family class; instance count on older
        # accounts): another pool may be of a family with room, and none is NoCapacity
        *QUOTA_ERRORS,
    }
)


@dataclass(frozen=True)
class Pool:
    instance_type: str
    subnet_id: str
    market: Market

    def describe(self) -> str:
        return f"{self.market} {self.instance_type} in {self.subnet_id}"


def instance_types(plan: Plan, config: Config) -> tuple[str, ...]:
    """The plan's instance types (sized by prepare from the bytes to copy, or the stack's
    explicit setting), else the stack's INSTANCE_TYPES."""
    # read loosely: prepare adds instanceTypes (planning.py) and older plans lack it
    planned = tuple(cast("Mapping[str, Any]", plan).get("instanceTypes") or ())
    return planned or config.instance_types


def pools(config: Config, launch_attempt: int, types: tuple[str, ...] | None = None) -> list[Pool]:
    """Spot pools, then On-Demand ones if allowed. Instance types keep their order of preference;
    each relaunch (launchAttempt > 1, after an instance was lost) starts in the next subnet, so
    an AZ that just reclaimed a Spot instance is tried last."""
    shift = (launch_attempt - 1) % len(config.subnet_ids)
    subnets = config.subnet_ids[shift:] + config.subnet_ids[:shift]
    markets: list[Market] = ["spot", "on-demand"] if config.allow_on_demand else ["spot"]
    return [
        Pool(instance_type, subnet_id, market)
        for market in markets
        for instance_type in (types or config.instance_types)
        for subnet_id in subnets
    ]


def launch(plan: Plan, launch_attempt: int, config: Config) -> InstanceResult:
    failed: list[FailedPool] = []
    for pool in pools(config, launch_attempt, instance_types(plan, config)):
        try:
            return _run(plan, launch_attempt, pool, failed, config)
        except ClientError as error:
            if aws.error_code(error) not in CAPACITY_ERRORS:
                raise
            failed.append(
                {
                    "instanceType": pool.instance_type,
                    "subnetId": pool.subnet_id,
                    "market": pool.market,
                    "error": f"{aws.error_code(error)}: {aws.error_message(error)}",
                }
            )
            logger.info("no capacity in pool", extra={"pool": pool.describe()})
            emit("CapacityErrors", 1, {"Market": MARKETS[pool.market]})
    tried = "; ".join(
        f"{f['market']} {f['instanceType']} in {f['subnetId']} ({f['error'].split(':')[0]})"
        for f in failed
    )
    if config.allow_on_demand:
        quota = any(f["error"].split(":")[0] in QUOTA_ERRORS for f in failed)
        raise NoCapacity(
            f"no Spot or On-Demand capacity in any pool (tried {tried}): add instance types or "
            "subnets in other AZs to the stack settings, or try again later"
            + (
                "; the account's On-Demand quota is reached: lower the batch's maxConcurrency "
                "or ask for a higher 'Running On-Demand instances' vCPU quota"
                if quota
                else ""
            )
        )
    raise NoSpotCapacity(
        f"no Spot capacity in any pool (tried {tried}) and On-Demand is not allowed: set "
        "allowOnDemand, add instance types or subnets in other AZs, or try again later"
    )


def is_about_initialization_rate(error: ClientError) -> bool:
    """A capacity error about a provisioned volume initialization rate (EC2 says so only in the
    message): the caller goes on with the default rate."""
    message = aws.error_message(error).lower()
    return "initializationrate" in message or "initialization rate" in message


def _run(
    plan: Plan,
    launch_attempt: int,
    pool: Pool,
    failed: list[FailedPool],
    config: Config,
) -> InstanceResult:
    request = run_instances_request(plan, launch_attempt, pool, config)
    instance = aws.ec2().run_instances(**request)["Instances"][0]
    emit("LaunchedSpot" if pool.market == "spot" else "LaunchedOnDemand", 1)
    logger.info("launched", extra={"instanceId": instance["InstanceId"], "pool": pool.describe()})
    return {
        "instanceId": instance["InstanceId"],
        "availabilityZone": instance.get("Placement", {}).get("AvailabilityZone", ""),
        "subnetId": pool.subnet_id,
        "instanceType": pool.instance_type,
        "market": pool.market,
        "failedPools": failed,
    }


def run_instances_request(
    plan: Plan, launch_attempt: int, pool: Pool, config: Config
) -> RunInstancesRequestTypeDef:
    execution = plan["executionName"]
    request: RunInstancesRequestTypeDef = {
        "MinCount": 1,
        "MaxCount": 1,
        "LaunchTemplate": {
            "LaunchTemplateId": config.launch_template_id,
            "Version": LAUNCH_TEMPLATE_VERSION,
        },
        "InstanceType": pool.instance_type,  # type: ignore[typeddict-item]
        "SubnetId": pool.subnet_id,
        "BlockDeviceMappings": block_device_mappings(plan, config),
        "TagSpecifications": [
            tags.specification(
                "instance", tags.ownership(config.stack_name, execution, tags.ROLE_INSTANCE)
            ),
            # RunInstances tags every volume alike (root and targets): all are the transfer
            # instance's, deleted with it
            tags.specification(
                "volume", tags.ownership(config.stack_name, execution, tags.ROLE_INSTANCE)
            ),
        ],
        # a retried Lambda call gets the instance of the first call instead of a second one
        "ClientToken": _client_token(execution, launch_attempt, pool),
    }
    if pool.market == "spot":
        request["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return request


def block_device_mappings(plan: Plan, config: Config) -> list[BlockDeviceMappingTypeDef]:
    """The root and one blank target volume per source volume; no source volume (see above).
    A dry run (plan dryRun) writes nothing and target snapshot writes the new snapshots directly
    (EBS direct APIs), so both get the root alone."""
    mappings: list[BlockDeviceMappingTypeDef] = []
    for volume in plan["volumes"] if has_target_volumes(plan) else []:
        iops, throughput = gp3_performance(volume["sizeGiB"], config)
        # the target is written as fast as the source is read, so it gets the same performance
        target: EbsBlockDeviceTypeDef = {
            "VolumeSize": volume["sizeGiB"],
            "VolumeType": "gp3",
            "Iops": iops,
            "Throughput": throughput,
            "DeleteOnTermination": True,
        }
        if volume["encrypted"]:
            target["Encrypted"] = True
            # targetKmsKeyId (prepare): this account's key for the target, None = EBS default key
            key = cast("Mapping[str, Any]", volume).get("targetKmsKeyId", volume["kmsKeyId"])
            if key:
                target["KmsKeyId"] = key
        mappings.append({"DeviceName": target_device(volume["index"]), "Ebs": target})
    mappings.append({"DeviceName": config.root_device_name, "Ebs": root_volume(plan, config)})
    return mappings


def root_volume(plan: Plan, config: Config) -> EbsBlockDeviceTypeDef:
    """The root volume, stated here rather than left to the launch template: it must stay
    encrypted whether RunInstances merges its mappings with the template's or replaces them, and
    `trim` needs room on it. The data-plane program stages each partition of a `trim` job in a
    sparse scratch image under /var/tmp, on the root filesystem, which may grow as large as the
    partition; volumes are copied one after the other, so the largest source volume bounds it.
    AL2023's cloud-init grows the root filesystem to the volume at boot."""
    size = config.root_volume_gib
    if plan["method"] == "trim" and not plan.get("dryRun"):  # a dry run stages nothing
        largest = max((volume["sizeGiB"] for volume in plan["volumes"]), default=0)
        size = min(size + largest, GP3_MAX_SIZE_GIB)
    # no SnapshotId: the AMI's root snapshot; gp3's baseline IOPS and throughput
    return {
        "VolumeSize": size,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }


def gp3_performance(size_gib: int, config: Config) -> tuple[int, int]:
    """The configured gp3 IOPS and throughput, lowered to what a volume of this size may have
    (source volumes, created by attach_volumes, and targets alike):
    at most 500 IOPS per GiB (never below the 3,000 baseline) and 0.25 MiB/s per IOPS.
    RunInstances rejects the whole launch otherwise (e.g. 16,000 IOPS on an 8 GiB volume)."""
    iops = max(GP3_MIN_IOPS, min(config.source_volume_iops, size_gib * GP3_MAX_IOPS_PER_GIB))
    throughput = min(config.source_volume_throughput, int(iops * GP3_MIB_PER_IOPS))
    return iops, throughput


def _client_token(execution: str, launch_attempt: int, pool: Pool) -> str:
    key = f"{execution}|{launch_attempt}|{pool.market}|{pool.instance_type}|{pool.subnet_id}"
    return hashlib.sha256(key.encode()).hexdigest()[:64]
