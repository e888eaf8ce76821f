"""The Lambda environment set by the stack (contract/environment.json, docs/contract.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from compactor import contract
from compactor.errors import ConfigError

# gp3 limits as documented by the botocore model this package ships with
# (test/lambdas/test_config.py reads them back from that model so a botocore bump that changes
# them fails); contract/limits.json holds them for the stack too.
GP3_MIN_IOPS = contract.limit("gp3MinIops")
GP3_MAX_IOPS = contract.limit("gp3MaxIops")
GP3_MIN_THROUGHPUT = contract.limit("gp3MinThroughput")
GP3_MAX_THROUGHPUT = contract.limit("gp3MaxThroughput")
GP3_MIB_PER_IOPS = contract.limit_value("gp3MiBPerIops")
# gp3 also allows at most 500 IOPS per GiB of volume size (EBS User Guide, "General Purpose SSD
# volumes"; not in the botocore model): a small volume cannot take the configured IOPS
GP3_MAX_IOPS_PER_GIB = contract.limit("gp3MaxIopsPerGiB")
GP3_MAX_SIZE_GIB = contract.limit("gp3MaxSizeGiB")
VOLUME_INITIALIZATION_RATE_MIN = contract.limit("volumeInitializationRateMin")
VOLUME_INITIALIZATION_RATE_MAX = contract.limit("volumeInitializationRateMax")

_SUBNET_ID = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_LAUNCH_TEMPLATE_ID = re.compile(r"^lt-[0-9a-f]{8,17}$")
_INSTANCE_TYPE = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+$")
_ROOT_DEVICE_NAME = re.compile(r"^/dev/(sd|xvd)[a-z][0-9]*$")
# the source and target volumes' device names (compactor/volumes.py): the root cannot be one
_DATA_DEVICE_NAME = re.compile(r"^/dev/sd[f-y]$")
ARCHITECTURES = ("x86_64", "arm64")
# the keys Config.from_env reads (contract/environment.json; a test holds the two equal)
ENVIRONMENT_KEYS = contract.variable_names("Config")


class _NotGiven:
    """A Config field whose key the function was not given: reading it fails, naming the key."""

    def __init__(self, key: str, task: str) -> None:
        self.message = (
            f"{task} reads {key}, which contract/environment.json does not give it: add {task} "
            f"to the functions of {key} there (the stack then sets it on {task})"
        )


@dataclass(frozen=True, eq=False)
class Config:
    """The workflow functions' settings. Config.from_env(task=MODULE) reads only the keys
    contract/environment.json gives that function; every other field refuses to be read."""

    stack_name: str
    subnet_ids: tuple[str, ...]
    launch_template_id: str
    instance_types: tuple[str, ...]
    allow_on_demand: bool
    source_volume_iops: int
    source_volume_throughput: int
    volume_initialization_rate: int | None
    max_volume_gib: int
    document_name: str
    command_log_group: str
    event_bus_name: str
    trigger_tag_key: str
    root_device_name: str
    root_volume_gib: int
    # the transfer instance's architecture; picks the size table of compactor/sizing.py
    architecture: str = "x86_64"
    # bounds the compaction time budget (JobTooLarge when it does not fit)
    state_machine_timeout_minutes: int = 2880
    # the shortest wait between two Check compaction calls (it grows for long jobs)
    compaction_poll_seconds: int = 120
    # the stack's bucket for the source snapshots' block lists (compactor/source_blocks.py)
    source_blocks_bucket: str = ""
    # the stack's bucket for batch results (the Map's result files, batch reports)
    batch_results_bucket: str = ""
    # the data-plane program (the stack's file asset): start_compaction presigns its GET
    program_bucket: str = ""
    program_key: str = ""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if isinstance(value, _NotGiven):
            raise ConfigError(value.message)
        return value

    def __repr__(self) -> str:
        given = {
            f.name: object.__getattribute__(self, f.name)
            for f in fields(self)
            if not isinstance(object.__getattribute__(self, f.name), _NotGiven)
        }
        return f"Config({', '.join(f'{k}={v!r}' for k, v in given.items())})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, task: str | None = None) -> Config:
        """The keys `task` is given (contract/environment.json), each checked; None: every key
        (the tests of code that several functions share)."""
        env = _Env(os.environ if environ is None else environ)
        keys = ENVIRONMENT_KEYS if task is None else contract.task_variable_names(task, "Config")
        values: dict[str, Any] = {
            field: _NotGiven(key, task or "") for key, (field, _) in _READERS.items()
        }
        for key in keys:
            field, read = _READERS[key]
            values[field] = read(env)
        if {"SOURCE_VOLUME_IOPS", "SOURCE_VOLUME_THROUGHPUT"} <= set(keys):
            _check_throughput(values["source_volume_iops"], values["source_volume_throughput"])
        return cls(**values)


def _check_throughput(iops: int, throughput: int) -> None:
    if throughput > iops * GP3_MIB_PER_IOPS:
        raise ConfigError(
            f"SOURCE_VOLUME_THROUGHPUT={throughput} needs at least "
            f"{int(throughput / GP3_MIB_PER_IOPS)} IOPS (gp3 allows {GP3_MIB_PER_IOPS} MiB/s "
            f"per IOPS) but SOURCE_VOLUME_IOPS={iops}: raise the IOPS or lower the throughput"
        )


def _initialization_rate(env: _Env) -> int | None:
    rate = env.integer("VOLUME_INITIALIZATION_RATE", 0, VOLUME_INITIALIZATION_RATE_MAX)
    if 0 < rate < VOLUME_INITIALIZATION_RATE_MIN:
        raise ConfigError(
            f"VOLUME_INITIALIZATION_RATE={rate} is invalid: use 0 (off) or "
            f"{VOLUME_INITIALIZATION_RATE_MIN}-{VOLUME_INITIALIZATION_RATE_MAX} MiB/s"
        )
    return rate or None


def _limited(name: str, low: str, high: str) -> Callable[[_Env], int]:
    return lambda env: env.integer(name, contract.limit(low), contract.limit(high))


def _root_device_name(env: _Env) -> str:
    root_device_name = env.matching("ROOT_DEVICE_NAME", _ROOT_DEVICE_NAME)
    if _DATA_DEVICE_NAME.match(root_device_name):
        raise ConfigError(
            f"ROOT_DEVICE_NAME={root_device_name!r} is invalid: /dev/sdf-/dev/sdy are the "
            "source and target volumes' device names; use the launch template's root device "
            "(e.g. /dev/xvda)"
        )
    return root_device_name


class _Env:
    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def text(self, name: str) -> str:
        value = self._environ.get(name, "").strip()
        if not value:
            raise ConfigError(
                f"environment variable {name} is missing or empty: the stack sets it on the "
                "functions contract/environment.json gives it; redeploy the stack or set it"
            )
        return value

    def matching(self, name: str, pattern: re.Pattern[str]) -> str:
        value = self.text(name)
        if not pattern.match(value):
            raise ConfigError(f"{name}={value!r} is invalid: expected {pattern.pattern}")
        return value

    def id_list(
        self, name: str, pattern: re.Pattern[str], allow_empty: bool = False
    ) -> tuple[str, ...]:
        if allow_empty and name in self._environ and not self._environ[name].strip():
            return ()  # set and empty on purpose (a missing variable is still an error)
        items = tuple(item.strip() for item in self.text(name).split(",") if item.strip())
        bad = [item for item in items if not pattern.match(item)]
        if bad or not items:
            raise ConfigError(
                f"{name}={self._environ.get(name)!r} is invalid: expected a comma-separated list "
                f"matching {pattern.pattern} (bad: {', '.join(bad) or 'empty list'})"
            )
        if len(set(items)) != len(items):
            raise ConfigError(f"{name}={self._environ.get(name)!r} lists an item twice")
        return items

    def one_of(self, name: str, allowed: tuple[str, ...]) -> str:
        value = self.text(name)
        if value not in allowed:
            raise ConfigError(f"{name}={value!r} is invalid: expected one of {', '.join(allowed)}")
        return value

    def boolean(self, name: str) -> bool:
        value = self.text(name).lower()
        if value not in ("true", "false"):
            raise ConfigError(f"{name}={value!r} is invalid: expected true or false")
        return value == "true"

    def integer(self, name: str, low: int, high: int) -> int:
        value = self.text(name)
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not an integer") from None
        if not low <= number <= high:
            raise ConfigError(f"{name}={number} is out of range: expected {low}-{high}")
        return number


# environment key -> (Config field, its reader)
_READERS: dict[str, tuple[str, Callable[[_Env], Any]]] = {
    "STACK_NAME": ("stack_name", lambda env: env.text("STACK_NAME")),
    "SUBNET_IDS": ("subnet_ids", lambda env: env.id_list("SUBNET_IDS", _SUBNET_ID)),
    "LAUNCH_TEMPLATE_ID": (
        "launch_template_id",
        lambda env: env.matching("LAUNCH_TEMPLATE_ID", _LAUNCH_TEMPLATE_ID),
    ),
    # empty = chosen by the bytes to copy (compactor/sizing.py); set = the user's choice
    "INSTANCE_TYPES": (
        "instance_types",
        lambda env: env.id_list("INSTANCE_TYPES", _INSTANCE_TYPE, allow_empty=True),
    ),
    "ALLOW_ON_DEMAND": ("allow_on_demand", lambda env: env.boolean("ALLOW_ON_DEMAND")),
    "SOURCE_VOLUME_IOPS": (
        "source_volume_iops",
        lambda env: env.integer("SOURCE_VOLUME_IOPS", GP3_MIN_IOPS, GP3_MAX_IOPS),
    ),
    "SOURCE_VOLUME_THROUGHPUT": (
        "source_volume_throughput",
        lambda env: env.integer("SOURCE_VOLUME_THROUGHPUT", GP3_MIN_THROUGHPUT, GP3_MAX_THROUGHPUT),
    ),
    "VOLUME_INITIALIZATION_RATE": ("volume_initialization_rate", _initialization_rate),
    "MAX_VOLUME_GIB": (
        "max_volume_gib",
        lambda env: env.integer("MAX_VOLUME_GIB", 1, GP3_MAX_SIZE_GIB),
    ),
    "DOCUMENT_NAME": ("document_name", lambda env: env.text("DOCUMENT_NAME")),
    "COMMAND_LOG_GROUP": ("command_log_group", lambda env: env.text("COMMAND_LOG_GROUP")),
    "EVENT_BUS_NAME": ("event_bus_name", lambda env: env.text("EVENT_BUS_NAME")),
    "TRIGGER_TAG_KEY": ("trigger_tag_key", lambda env: env.text("TRIGGER_TAG_KEY")),
    "ROOT_DEVICE_NAME": ("root_device_name", _root_device_name),
    "ROOT_VOLUME_GIB": (
        "root_volume_gib",
        lambda env: env.integer("ROOT_VOLUME_GIB", 1, GP3_MAX_SIZE_GIB),
    ),
    "ARCHITECTURE": ("architecture", lambda env: env.one_of("ARCHITECTURE", ARCHITECTURES)),
    "STATE_MACHINE_TIMEOUT_MINUTES": (
        "state_machine_timeout_minutes",
        _limited(
            "STATE_MACHINE_TIMEOUT_MINUTES",
            "stateMachineTimeoutMinutesMin",
            "stateMachineTimeoutMinutesMax",
        ),
    ),
    "COMPACTION_POLL_SECONDS": (
        "compaction_poll_seconds",
        _limited("COMPACTION_POLL_SECONDS", "pollSecondsMin", "pollSecondsMax"),
    ),
    "SOURCE_BLOCKS_BUCKET": ("source_blocks_bucket", lambda env: env.text("SOURCE_BLOCKS_BUCKET")),
    "BATCH_RESULTS_BUCKET": ("batch_results_bucket", lambda env: env.text("BATCH_RESULTS_BUCKET")),
    "PROGRAM_BUCKET": ("program_bucket", lambda env: env.text("PROGRAM_BUCKET")),
    "PROGRAM_KEY": ("program_key", lambda env: env.text("PROGRAM_KEY")),
}
