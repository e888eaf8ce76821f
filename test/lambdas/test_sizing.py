"""The size table and the compaction poll bound (compactor/sizing.py)."""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import moto
import pytest
from compactor import sizing
from compactor.config import Config
from compactor.errors import JobTooLarge
from test_config import VALID

GIB = 1024**3


def config(**env: str) -> Config:
    return Config.from_env({**VALID, "INSTANCE_TYPES": "", "ARCHITECTURE": "x86_64", **env})


def test_baselines_are_ec2s_documented_figures() -> None:
    """moto ships EC2's DescribeInstanceTypes answers: each baseline, architecture, Nitro and
    not-burstable claim of the table is checked against them."""
    data = json.loads(
        gzip.decompress(
            (Path(moto.__file__).parent / "ec2/resources/instance_types.json.gz").read_bytes()
        )
    )
    for instance_type, mbps in sizing.BASELINE_EBS_MBPS.items():
        described = data[instance_type]
        assert described["EbsInfo"]["EbsOptimizedInfo"]["BaselineBandwidthInMbps"] == mbps
        assert described["EbsInfo"]["EbsOptimizedSupport"] == "default", instance_type
        # volumes appear as NVMe devices, as the Command document expects
        assert described["EbsInfo"]["NvmeSupport"] == "required", instance_type
        assert described["Hypervisor"] == "nitro", instance_type
        assert described["BurstablePerformanceSupported"] is False, instance_type
    for architecture, families in sizing.FAMILIES.items():
        for size in sizing.SIZE_CLASSES:
            for instance_type in size.types(architecture):
                supported = data[instance_type]["ProcessorInfo"]["SupportedArchitectures"]
                assert architecture in supported, instance_type
        assert len(families) == 4


@pytest.mark.parametrize(
    ("gib", "size"),
    [
        (0, "large"),
        (200, "large"),
        (200 + 1 / GIB, "xlarge"),
        (500, "xlarge"),
        (501, "2xlarge"),
        (2048, "2xlarge"),
        (2049, "4xlarge"),
        (8192, "4xlarge"),
        (8193, "8xlarge"),
        (20_000, "8xlarge"),
    ],
)
def test_size_class_boundaries(gib: float, size: str) -> None:
    assert sizing.size_class(int(gib * GIB)).size == size
    chosen = sizing.plan(int(gib * GIB), False, config(STATE_MACHINE_TIMEOUT_MINUTES="525600"))
    assert chosen.instance_types == [f"{f}.{size}" for f in sizing.FAMILIES["x86_64"]]


def test_arm64_types() -> None:
    chosen = sizing.plan(GIB, True, config(ARCHITECTURE="arm64"))
    assert chosen.instance_types == ["m7g.large", "m6g.large", "c7g.large", "c6g.large"]


def test_the_users_instance_types_win() -> None:
    chosen = sizing.plan(3000 * GIB, False, config(INSTANCE_TYPES="c6i.4xlarge,m5.4xlarge"))
    assert chosen.instance_types == ["c6i.4xlarge", "m5.4xlarge"]
    # the rate is the slowest of them (m5.4xlarge: 4,750 Mbps)
    rate = sizing.copy_rate(4750, config())
    assert chosen.budget_seconds == sizing.budget_seconds(3000 * GIB, rate, False)


def test_copy_rate_is_half_the_link_or_the_volumes_throughput() -> None:
    assert sizing.copy_rate(650, config()) == 650e6 / 8 / 2
    slow_volumes = config(SOURCE_VOLUME_THROUGHPUT="125")
    assert sizing.copy_rate(10_000, slow_volumes) == 125 * 1024**2


def test_budget_formula() -> None:
    rate = 40_625_000.0
    assert sizing.budget_seconds(0, rate, True) == sizing.FIXED_OVERHEAD_SECONDS
    assert sizing.budget_seconds(100 * GIB, rate, False) == math.ceil(900 + 100 * GIB / rate * 2.0)
    assert sizing.budget_seconds(100 * GIB, rate, True) == math.ceil(900 + 100 * GIB / rate * 4.0)


@pytest.mark.parametrize("budget", [1, 900, 43_200, 43_201, 100_000, 172_800])
def test_poll_bound_covers_the_budget_in_at_most_360_calls(budget: int) -> None:
    poll = sizing.poll(budget, config())
    assert poll["intervalSeconds"] >= 120
    assert 1 <= poll["maxAttempts"] <= sizing.MAX_POLL_ATTEMPTS
    assert poll["intervalSeconds"] * poll["maxAttempts"] >= budget
    # not more than one interval beyond it
    assert poll["intervalSeconds"] * (poll["maxAttempts"] - 1) < max(budget, 1)


def test_poll_interval_grows_for_long_jobs() -> None:
    assert sizing.poll(43_200, config()) == {"intervalSeconds": 120, "maxAttempts": 360}
    assert sizing.poll(72_000, config()) == {"intervalSeconds": 200, "maxAttempts": 360}
    assert sizing.poll(600, config(COMPACTION_POLL_SECONDS="30")) == {
        "intervalSeconds": 30,
        "maxAttempts": 20,
    }


def test_job_too_large_for_the_state_machine_timeout() -> None:
    small_timeout = config(STATE_MACHINE_TIMEOUT_MINUTES="600")  # 10 h - 2 h = 8 h
    with pytest.raises(JobTooLarge) as caught:
        sizing.plan(4000 * GIB, True, small_timeout)
    message = str(caught.value)
    assert "copying 4,000 GiB and verifying it on m7i.4xlarge" in message
    assert "stateMachineTimeoutMinutes to at least" in message
    needed = int(re.search(r"at least (\d+)", message)[1])  # type: ignore[index]
    # the number it names is enough
    sizing.plan(4000 * GIB, True, config(STATE_MACHINE_TIMEOUT_MINUTES=str(needed)))
    with pytest.raises(JobTooLarge):
        sizing.plan(4000 * GIB, True, config(STATE_MACHINE_TIMEOUT_MINUTES=str(needed - 1)))


def test_job_too_large_for_the_documents_timeout() -> None:
    """The Command document stops at 48 h whatever the state machine allows."""
    with pytest.raises(JobTooLarge, match="Command document's timeout of 48 h") as caught:
        sizing.plan(64 * 1024 * GIB, True, config(STATE_MACHINE_TIMEOUT_MINUTES="525600"))
    assert "stateMachineTimeoutMinutes" not in str(caught.value)


def test_user_types_are_named_in_the_refusal() -> None:
    with pytest.raises(JobTooLarge, match="set larger instanceTypes"):
        sizing.plan(16 * 1024 * GIB, False, config(INSTANCE_TYPES="m5.large"))


def test_default_timeout_takes_16_tib_without_verify() -> None:
    """The default 48 h state machine compacts a full 16 TiB volume (verify off) on .8xlarge."""
    chosen = sizing.plan(16 * 1024 * GIB, False, config())
    assert chosen.instance_types[0] == "m7i.8xlarge"
    assert chosen.budget_seconds + sizing.OTHER_PHASES_SECONDS <= 2880 * 60


def test_frozen_config_replace_keeps_types() -> None:
    assert replace(config(), instance_types=("m5.large",)).instance_types == ("m5.large",)
