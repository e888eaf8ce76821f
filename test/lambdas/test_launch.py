from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.config import Config
from compactor.ec2 import launch as launch_module
from compactor.handlers import launch, prepare
from conftest import EXECUTION, STACK, World
from support import capture, client_error, on_params


def plan_for(world: World, **execution_input: Any) -> dict[str, Any]:
    execution_input.setdefault("snapshotId", world.snapshot(size=30))
    execution_input.setdefault("target", "volume")  # the target-volume path unless told
    return prepare.handler({"input": execution_input, "executionName": EXECUTION}, world.context)


def run(world: World, plan: dict[str, Any], attempt: int = 1) -> dict[str, Any]:
    return launch.handler({"plan": plan, "launchAttempt": attempt}, world.context)


def fail_pools(failures: dict[tuple[str, str, str], str]) -> list[tuple[str, str, str]]:
    """Make RunInstances fail with the given error code in the given (market, type, subnet)
    pools; returns every pool RunInstances was called for."""
    calls: list[tuple[str, str, str]] = []

    def maybe_fail(params: dict[str, Any]) -> None:
        market = "spot" if "InstanceMarketOptions" in params else "on-demand"
        pool = (market, params["InstanceType"], params["SubnetId"])
        calls.append(pool)
        if pool in failures:
            raise client_error("RunInstances", failures[pool], f"no capacity for {pool}")

    on_params(aws.ec2(), "RunInstances", maybe_fail)
    return calls


def test_spot_launch_in_the_first_pool(world: World) -> None:
    plan = plan_for(world)
    calls = capture(aws.ec2(), "RunInstances")
    result = run(world, plan)
    assert result == {
        "instanceId": result["instanceId"],
        "availabilityZone": "us-east-1a",
        "subnetId": world.subnets[0],
        "instanceType": "m7i.large",
        "market": "spot",
        "failedPools": [],
    }
    (request,) = calls
    assert request["LaunchTemplate"] == {
        "LaunchTemplateId": world.launch_template_id,
        "Version": "$Latest",
    }
    assert request["InstanceMarketOptions"]["MarketType"] == "spot"
    # the root and the blank target only: no source volume at launch (item 1)
    assert request["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/sdp",
            "Ebs": {
                "VolumeSize": 30,
                "VolumeType": "gp3",
                "Iops": 6000,
                "Throughput": 500,
                "DeleteOnTermination": True,
            },
        },
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {
                "VolumeSize": 8,
                "VolumeType": "gp3",
                "Encrypted": True,
                "DeleteOnTermination": True,
            },
        },
    ]
    owned = [
        {"Key": "ebs-snapshot-compactor:stack", "Value": STACK},
        {"Key": "ebs-snapshot-compactor:execution", "Value": EXECUTION},
        {"Key": "ebs-snapshot-compactor:role", "Value": "transfer-instance"},
    ]
    assert request["TagSpecifications"] == [
        {"ResourceType": "instance", "Tags": owned},
        {"ResourceType": "volume", "Tags": owned},
    ]
    assert len(request["ClientToken"]) <= 64
    instance = world.ec2.describe_instances(InstanceIds=[result["instanceId"]])["Reservations"][0][
        "Instances"
    ][0]
    assert instance["InstanceLifecycle"] == "spot"
    volumes = world.ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [result["instanceId"]]}]
    )["Volumes"]
    assert {v["AvailabilityZone"] for v in volumes} == {"us-east-1a"}


def test_target_is_encrypted_like_the_plan_says(world: World) -> None:
    plan = plan_for(world, kmsKeyId=world.kms_key_arn)
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    target = calls[0]["BlockDeviceMappings"][0]["Ebs"]
    assert calls[0]["BlockDeviceMappings"][0]["DeviceName"] == "/dev/sdp"
    assert (target["Encrypted"], target["KmsKeyId"]) == (True, world.kms_key_arn)


def test_target_key_follows_the_plan_s_target_key(world: World) -> None:
    """prepare's targetKmsKeyId (this account's key) wins over the source's kmsKeyId; None
    means the account's default EBS key: Encrypted without KmsKeyId."""
    plan = plan_for(world, kmsKeyId=world.kms_key_arn)
    other = aws.kms().create_key()["KeyMetadata"]["Arn"]
    calls = capture(aws.ec2(), "RunInstances")
    run(world, dict(plan, volumes=[dict(plan["volumes"][0], targetKmsKeyId=other)]))
    run(world, dict(plan, volumes=[dict(plan["volumes"][0], targetKmsKeyId=None)]), attempt=2)
    first, second = (c["BlockDeviceMappings"][0]["Ebs"] for c in calls)
    assert (first["Encrypted"], first["KmsKeyId"]) == (True, other)
    assert second["Encrypted"] is True
    assert "KmsKeyId" not in second


@pytest.mark.parametrize(
    ("size_gib", "iops", "throughput"),
    [(30, 6000, 500), (8, 4000, 500), (5, 3000, 500), (1, 3000, 500)],
)
def test_gp3_iops_are_capped_at_500_per_gib(
    world: World, size_gib: int, iops: int, throughput: int
) -> None:
    """gp3 allows at most 500 IOPS per GiB: 6,000 IOPS on an 8 GiB volume fails RunInstances."""
    plan = plan_for(world, snapshotId=world.snapshot(size=size_gib))
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    for mapping in calls[0]["BlockDeviceMappings"][:1]:  # the root volume keeps gp3's baseline
        ebs = mapping["Ebs"]
        assert (ebs["Iops"], ebs["Throughput"]) == (iops, throughput)
        assert ebs["Iops"] <= max(3000, 500 * size_gib)
        assert ebs["Throughput"] <= ebs["Iops"] * 0.25


def test_gp3_throughput_follows_the_capped_iops(world: World, monkeypatch: Any) -> None:
    monkeypatch.setenv("SOURCE_VOLUME_IOPS", "16000")
    monkeypatch.setenv("SOURCE_VOLUME_THROUGHPUT", "1000")
    plan = plan_for(world, snapshotId=world.snapshot(size=1))
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    assert [
        (m["Ebs"]["Iops"], m["Ebs"]["Throughput"]) for m in calls[0]["BlockDeviceMappings"][:1]
    ] == [(3000, 750)]


def test_multi_volume_plan_maps_the_targets_in_order_and_no_source(world: World) -> None:
    plan = plan_for(world)
    second = dict(plan["volumes"][0], index=1, sourceSnapshotId=world.snapshot(size=5), sizeGiB=5)
    plan["volumes"].append(second)
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    assert [m["DeviceName"] for m in calls[0]["BlockDeviceMappings"]] == [
        "/dev/sdp",
        "/dev/sdq",
        "/dev/xvda",
    ]
    assert not any("SnapshotId" in m["Ebs"] for m in calls[0]["BlockDeviceMappings"])


def root_mapping(request: dict[str, Any]) -> dict[str, Any]:
    (root,) = [m for m in request["BlockDeviceMappings"] if m["DeviceName"] == "/dev/xvda"]
    return root["Ebs"]  # type: ignore[no-any-return]


def test_allocated_gets_an_encrypted_root_of_the_template_size(world: World) -> None:
    """Stated in RunInstances so the root stays encrypted even if the request's mappings
    replace the launch template's rather than merge with them."""
    plan = plan_for(world, method="allocated")
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    assert root_mapping(calls[0]) == {
        "VolumeSize": 8,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }


def test_trim_gets_a_root_with_room_for_the_largest_volume(world: World) -> None:
    """trim stages each partition in a scratch image under /var/tmp on the root filesystem;
    volumes are copied one after the other, so the largest one bounds the scratch space."""
    plan = plan_for(world, method="trim")
    for index, size in ((1, 50), (2, 5)):
        plan["volumes"].append(
            dict(
                plan["volumes"][0],
                index=index,
                sourceSnapshotId=world.snapshot(size=size),
                sizeGiB=size,
            )
        )
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    assert root_mapping(calls[0]) == {
        "VolumeSize": 8 + 50,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }


def test_trim_root_size_follows_the_environment(world: World, monkeypatch: Any) -> None:
    monkeypatch.setenv("ROOT_DEVICE_NAME", "/dev/sda1")
    monkeypatch.setenv("ROOT_VOLUME_GIB", "30")
    plan = plan_for(world, method="trim")
    calls = capture(aws.ec2(), "RunInstances")
    run(world, plan)
    (root,) = [m for m in calls[0]["BlockDeviceMappings"] if m["DeviceName"] == "/dev/sda1"]
    assert root["Ebs"]["VolumeSize"] == 30 + 30
    assert "/dev/xvda" not in {m["DeviceName"] for m in calls[0]["BlockDeviceMappings"]}


def test_trim_root_size_stops_at_the_gp3_maximum(world: World) -> None:
    plan = plan_for(world, method="trim")
    plan["volumes"][0]["sizeGiB"] = 65_536
    config = Config.from_env()
    assert launch_module.root_volume(plan, config)["VolumeSize"] == 65_536


def test_capacity_error_moves_to_the_next_pool(world: World) -> None:
    plan = plan_for(world)
    first = ("spot", "m7i.large", world.subnets[0])
    calls = fail_pools({first: "InsufficientInstanceCapacity"})
    result = run(world, plan)
    assert calls == [first, ("spot", "m7i.large", world.subnets[1])]
    assert (result["market"], result["subnetId"], result["availabilityZone"]) == (
        "spot",
        world.subnets[1],
        "us-east-1b",
    )
    assert result["failedPools"] == [
        {
            "instanceType": "m7i.large",
            "subnetId": world.subnets[0],
            "market": "spot",
            "error": f"InsufficientInstanceCapacity: no capacity for {first}",
        }
    ]


@pytest.mark.parametrize(
    "code",
    [
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
    ],
)
def test_every_capacity_error_is_recognised(world: World, code: str) -> None:
    plan = plan_for(world)
    fail_pools({("spot", "m7i.large", world.subnets[0]): code})
    assert run(world, plan)["failedPools"][0]["error"].startswith(code)


def test_on_demand_after_every_spot_pool_failed(world: World) -> None:
    plan = plan_for(world)
    spot = [("spot", t, s) for t in ("m7i.large", "m6i.large") for s in world.subnets]
    calls = fail_pools(dict.fromkeys(spot, "InsufficientInstanceCapacity"))
    result = run(world, plan)
    assert calls == [*spot, ("on-demand", "m7i.large", world.subnets[0])]
    assert result["market"] == "on-demand"
    assert len(result["failedPools"]) == 4
    instance = world.ec2.describe_instances(InstanceIds=[result["instanceId"]])["Reservations"][0][
        "Instances"
    ][0]
    assert "InstanceLifecycle" not in instance


def test_no_spot_capacity_when_on_demand_is_not_allowed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOW_ON_DEMAND", "false")
    plan = plan_for(world)
    spot = [("spot", t, s) for t in ("m7i.large", "m6i.large") for s in world.subnets]
    calls = fail_pools(dict.fromkeys(spot, "InsufficientInstanceCapacity"))
    before = world.inventory()
    with pytest.raises(errors.NoSpotCapacity) as caught:
        run(world, plan)
    assert calls == spot
    for _, instance_type, subnet in spot:
        assert f"spot {instance_type} in {subnet}" in str(caught.value)
    assert "allowOnDemand" in str(caught.value)
    assert world.inventory() == before


def test_no_capacity_at_all(world: World) -> None:
    plan = plan_for(world)
    pools = [
        (m, t, s)
        for m in ("spot", "on-demand")
        for t in ("m7i.large", "m6i.large")
        for s in world.subnets
    ]
    fail_pools(dict.fromkeys(pools, "InsufficientInstanceCapacity"))
    with pytest.raises(errors.NoCapacity, match="no Spot or On-Demand capacity"):
        run(world, plan)


@pytest.mark.parametrize("code", ["VcpuLimitExceeded", "InstanceLimitExceeded"])
def test_an_on_demand_quota_error_moves_on_and_ends_in_no_capacity(world: World, code: str) -> None:
    """A batch above the account's On-Demand vCPU quota: RunInstances answers VcpuLimitExceeded
    (InstanceLimitExceeded on accounts with instance-count limits). The next pool may be of a
    family with room; when none has, the run ends in NoCapacity, not a raw ClientError."""
    plan = plan_for(world)
    spot = [("spot", t, s) for t in ("m7i.large", "m6i.large") for s in world.subnets]
    first_on_demand = ("on-demand", "m7i.large", world.subnets[0])
    fail_pools({**dict.fromkeys(spot, "InsufficientInstanceCapacity"), first_on_demand: code})
    result = run(world, plan)
    assert result["market"] == "on-demand"
    assert result["failedPools"][-1]["error"].startswith(code)
    on_demand = [("on-demand", t, s) for t in ("m7i.large", "m6i.large") for s in world.subnets]
    fail_pools(
        {**dict.fromkeys(spot, "InsufficientInstanceCapacity"), **dict.fromkeys(on_demand, code)}
    )
    with pytest.raises(errors.NoCapacity, match=code):
        run(world, plan, attempt=2)


def test_other_errors_are_not_capacity_errors(world: World) -> None:
    plan = plan_for(world)
    fail_pools({("spot", "m7i.large", world.subnets[0]): "UnauthorizedOperation"})
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        run(world, plan)


def test_no_initialization_rate_at_launch(world: World) -> None:
    """The rate is asked for by attach_volumes' CreateVolume of the sources, never at launch."""
    plan = plan_for(world)
    calls = capture(aws.ec2(), "RunInstances")
    result = run(world, plan)
    assert "volumeInitializationRate" not in result
    for mapping in calls[0]["BlockDeviceMappings"]:
        assert "VolumeInitializationRate" not in mapping["Ebs"]


def test_plan_instance_types_win_over_the_environment(world: World) -> None:
    plan = plan_for(world)
    plan["instanceTypes"] = ["c7i.2xlarge", "m7i.2xlarge"]
    spot = [("spot", "c7i.2xlarge", s) for s in world.subnets]
    calls = fail_pools(dict.fromkeys(spot, "InsufficientInstanceCapacity"))
    result = run(world, plan)
    assert calls == [*spot, ("spot", "m7i.2xlarge", world.subnets[0])]
    assert result["instanceType"] == "m7i.2xlarge"


@pytest.mark.parametrize("planned", [None, []])
def test_environment_instance_types_without_plan_ones(world: World, planned: Any) -> None:
    """A plan of before prepare sized the instance (the handler now refuses it: plan.schema.json
    requires instanceTypes) still launches the stack's types."""
    plan = plan_for(world)
    plan.pop("instanceTypes", None)
    if planned is not None:
        plan["instanceTypes"] = planned
    config = Config.from_env()
    assert launch_module.instance_types(plan, config) == config.instance_types  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidInput, match="'plan' is not a Plan"):
        run(world, plan)


def test_relaunch_starts_in_the_next_subnet(world: World) -> None:
    plan = plan_for(world)
    calls = capture(aws.ec2(), "RunInstances")
    result = run(world, plan, attempt=2)
    assert calls[0]["SubnetId"] == result["subnetId"] == world.subnets[1]
    assert calls[0]["InstanceType"] == "m7i.large"
