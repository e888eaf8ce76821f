from __future__ import annotations

import botocore.session
import pytest
from compactor import config as config_module
from compactor.config import Config
from compactor.errors import ConfigError

VALID = {
    "STACK_NAME": "compactor",
    "SUBNET_IDS": "subnet-0123456789abcdef0, subnet-0123456789abcdef1",
    "LAUNCH_TEMPLATE_ID": "lt-0123456789abcdef0",
    "INSTANCE_TYPES": "m7i.large,c6i.large",
    "ALLOW_ON_DEMAND": "false",
    "SOURCE_VOLUME_IOPS": "3000",
    "SOURCE_VOLUME_THROUGHPUT": "750",
    "VOLUME_INITIALIZATION_RATE": "0",
    "MAX_VOLUME_GIB": "2048",
    "DOCUMENT_NAME": "compactor-CompactVolumes",
    "COMMAND_LOG_GROUP": "/compactor/commands",
    "EVENT_BUS_NAME": "default",
    "TRIGGER_TAG_KEY": "compact",
    "ROOT_DEVICE_NAME": "/dev/xvda",
    "ROOT_VOLUME_GIB": "8",
    "ARCHITECTURE": "arm64",
    "STATE_MACHINE_TIMEOUT_MINUTES": "2880",
    "COMPACTION_POLL_SECONDS": "120",
    "SOURCE_BLOCKS_BUCKET": "compactor-sourceblocksbucket-0123",
    "BATCH_RESULTS_BUCKET": "compactor-batchresultsbucket-0123",
    "PROGRAM_BUCKET": "cdk-hnb659fds-assets-123456789012-us-east-1",
    "PROGRAM_KEY": "0123abcd.pyz",
}


def test_reads_every_variable() -> None:
    config = Config.from_env(VALID)
    assert config.subnet_ids == ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
    assert config.instance_types == ("m7i.large", "c6i.large")
    assert config.allow_on_demand is False
    assert config.volume_initialization_rate is None
    assert (config.source_volume_iops, config.source_volume_throughput) == (3000, 750)
    assert config.max_volume_gib == 2048
    assert config.source_blocks_bucket == "compactor-sourceblocksbucket-0123"
    assert config.batch_results_bucket == "compactor-batchresultsbucket-0123"
    assert (config.root_device_name, config.root_volume_gib) == ("/dev/xvda", 8)
    assert config.architecture == "arm64"
    assert (config.state_machine_timeout_minutes, config.compaction_poll_seconds) == (2880, 120)


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_instance_types_means_sized_by_the_job(value: str) -> None:
    assert Config.from_env({**VALID, "INSTANCE_TYPES": value}).instance_types == ()


def test_is_frozen() -> None:
    config = Config.from_env(VALID)
    with pytest.raises(AttributeError):
        config.stack_name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_missing_variable_is_named(name: str) -> None:
    env = {k: v for k, v in VALID.items() if k != name}
    with pytest.raises(ConfigError, match=name):
        Config.from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "complaint"),
    [
        ("SUBNET_IDS", "subnet-0123456789abcdef0,vpc-1", "bad: vpc-1"),
        ("SUBNET_IDS", "subnet-0123456789abcdef0,subnet-0123456789abcdef0", "twice"),
        ("LAUNCH_TEMPLATE_ID", "template", "LAUNCH_TEMPLATE_ID"),
        ("INSTANCE_TYPES", "large", "INSTANCE_TYPES"),
        ("ALLOW_ON_DEMAND", "yes", "true or false"),
        ("SOURCE_VOLUME_IOPS", "2999", "3000-80000"),
        ("SOURCE_VOLUME_IOPS", "80001", "3000-80000"),
        ("SOURCE_VOLUME_IOPS", "fast", "not an integer"),
        ("SOURCE_VOLUME_THROUGHPUT", "124", "125-2000"),
        ("SOURCE_VOLUME_THROUGHPUT", "751", "needs at least 3004 IOPS"),
        ("VOLUME_INITIALIZATION_RATE", "99", "0 \\(off\\) or 100-300"),
        ("VOLUME_INITIALIZATION_RATE", "301", "0-300"),
        ("MAX_VOLUME_GIB", "65537", "1-65536"),
        ("ROOT_DEVICE_NAME", "xvda", "ROOT_DEVICE_NAME='xvda' is invalid"),
        ("ROOT_DEVICE_NAME", "/dev/nvme0n1", "ROOT_DEVICE_NAME='/dev/nvme0n1' is invalid"),
        ("ROOT_DEVICE_NAME", "/dev/sdf", "source and target volumes' device names"),
        ("ROOT_VOLUME_GIB", "0", "1-65536"),
        ("ROOT_VOLUME_GIB", "65537", "1-65536"),
        ("ROOT_VOLUME_GIB", "8GiB", "not an integer"),
        ("INSTANCE_TYPES", "m7i.large,,bad", "bad: bad"),
        ("ARCHITECTURE", "x86", "one of x86_64, arm64"),
        ("ARCHITECTURE", "", "missing or empty"),
        ("STATE_MACHINE_TIMEOUT_MINUTES", "9", "10-525600"),
        ("STATE_MACHINE_TIMEOUT_MINUTES", "525601", "10-525600"),
        ("STATE_MACHINE_TIMEOUT_MINUTES", "2d", "not an integer"),
        ("COMPACTION_POLL_SECONDS", "4", "5-3600"),
        ("COMPACTION_POLL_SECONDS", "3601", "5-3600"),
        ("COMPACTION_POLL_SECONDS", "", "missing or empty"),
        ("SOURCE_BLOCKS_BUCKET", "", "missing or empty"),
        ("BATCH_RESULTS_BUCKET", "", "missing or empty"),
        ("PROGRAM_BUCKET", "", "missing or empty"),
        ("PROGRAM_KEY", "", "missing or empty"),
    ],
)
def test_an_invalid_value_is_explained(name: str, value: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        Config.from_env({**VALID, name: value})


@pytest.mark.parametrize("name", ["/dev/xvda", "/dev/sda1", "/dev/sda"])
def test_root_device_names_of_ebs_amis_are_accepted(name: str) -> None:
    assert Config.from_env({**VALID, "ROOT_DEVICE_NAME": name}).root_device_name == name


def test_throughput_may_use_the_whole_ratio() -> None:
    config = Config.from_env(
        {**VALID, "SOURCE_VOLUME_IOPS": "8000", "SOURCE_VOLUME_THROUGHPUT": "2000"}
    )
    assert config.source_volume_throughput == 2000


def test_gp3_limits_are_those_of_the_shipped_botocore() -> None:
    """The limits are constants; the botocore model this package ships documents them."""
    ebs = botocore.session.get_session().get_service_model("ec2").shape_for("EbsBlockDevice")
    docs = {name: ebs.members[name].documentation for name in ebs.members}
    assert (
        f"<code>gp3</code>: {config_module.GP3_MIN_IOPS:,} - {config_module.GP3_MAX_IOPS:,} IOPS"
        in docs["Iops"]
    )
    assert (
        f"Minimum value of {config_module.GP3_MIN_THROUGHPUT}. "
        f"Maximum value of {config_module.GP3_MAX_THROUGHPUT:,}." in docs["Throughput"]
    )
    assert (
        f"Valid range: {config_module.VOLUME_INITIALIZATION_RATE_MIN} - "
        f"{config_module.VOLUME_INITIALIZATION_RATE_MAX} MiB/s" in docs["VolumeInitializationRate"]
    )
