"""How big a transfer instance a job gets and how long the compaction poll may wait for it.

The copy reads every allocated block of each source volume and writes it to the target volume,
one volume after the other; both cross the instance's EBS link, whose *baseline* bandwidth (what an
instance can sustain for hours; the "up to" burst figure lasts 30 minutes a day) is what bounds a
large job. So the size follows the bytes to copy (the table below, docs/deploy.md "Limits"), and
the time budget of the Check compaction loop follows the size's copy rate:

    copy rate     = min(baseline EBS throughput / 2 (read + write), gp3 throughput of the volumes)
    budget        = FIXED_OVERHEAD + bytes / copy rate x passes (2 with verify) x SAFETY_FACTOR
    interval      = max(COMPACTION_POLL_SECONDS, ceil(budget / MAX_POLL_ATTEMPTS))
    maxAttempts   = ceil(budget / interval)            (so never more than MAX_POLL_ATTEMPTS)

A budget that does not fit the state machine's timeout (minus OTHER_PHASES for launch, attach,
snapshots and teardown) or the Command document's own timeout is refused up front (JobTooLarge)
instead of timing out after a day.

Baseline EBS bandwidths are EC2's documented figures (DescribeInstanceTypes
EbsInfo.EbsOptimizedInfo.BaselineBandwidthInMbps; tests/test_sizing.py checks them against the
copy of that data moto ships). Every type is Nitro, EBS-optimized by default, and not burstable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from compactor import contract
from compactor.config import Config
from compactor.errors import JobTooLarge
from compactor.models import CompactionPoll

GIB = 1024**3
MIB = 1024**2

# documented baseline EBS bandwidth, Mbps (10^6 bit/s)
BASELINE_EBS_MBPS: dict[str, int] = {
    "m7i.large": 650, "m6i.large": 650, "c6i.large": 650, "m5.large": 650,
    "m7i.xlarge": 1250, "m6i.xlarge": 1250, "c6i.xlarge": 1250, "m5.xlarge": 1150,
    "m7i.2xlarge": 2500, "m6i.2xlarge": 2500, "c6i.2xlarge": 2500, "m5.2xlarge": 2300,
    "m7i.4xlarge": 5000, "m6i.4xlarge": 5000, "c6i.4xlarge": 5000, "m5.4xlarge": 4750,
    "m7i.8xlarge": 10000, "m6i.8xlarge": 10000, "c6i.8xlarge": 10000, "m5.8xlarge": 6800,
    "m7g.large": 630, "m6g.large": 630, "c7g.large": 630, "c6g.large": 630,
    "m7g.xlarge": 1250, "m6g.xlarge": 1188, "c7g.xlarge": 1250, "c6g.xlarge": 1188,
    "m7g.2xlarge": 2500, "m6g.2xlarge": 2375, "c7g.2xlarge": 2500, "c6g.2xlarge": 2375,
    "m7g.4xlarge": 5000, "m6g.4xlarge": 4750, "c7g.4xlarge": 5000, "c6g.4xlarge": 4750,
    "m7g.8xlarge": 10000, "m6g.8xlarge": 9500, "c7g.8xlarge": 10000, "c6g.8xlarge": 9500,
}  # fmt: skip

FAMILIES = {"x86_64": ("m7i", "m6i", "c6i", "m5"), "arm64": ("m7g", "m6g", "c7g", "c6g")}


@dataclass(frozen=True)
class SizeClass:
    size: str
    max_gib: int | None  # the largest job (bytes to copy, GiB) this size takes; None = no limit

    def types(self, architecture: str) -> tuple[str, ...]:
        return tuple(f"{family}.{self.size}" for family in FAMILIES[architecture])

    def baseline_mbps(self, architecture: str) -> int:
        """The slowest type of the class: any of them may be the one launched."""
        return min(BASELINE_EBS_MBPS[t] for t in self.types(architecture))


# docs/deploy.md's "Limits" table is generated from this one (python -m devkit.docs)
SIZE_CLASSES = (
    SizeClass("large", 200),
    SizeClass("xlarge", 500),
    SizeClass("2xlarge", 2048),
    SizeClass("4xlarge", 8192),
    SizeClass("8xlarge", None),
)

FIXED_OVERHEAD_SECONDS = 15 * 60  # command delivery, partition scan, filesystem checks
SAFETY_FACTOR = 2.0  # lazily loaded snapshot blocks, a busy host, other tenants of the link
# the Check compaction loop stops here whatever the plan says (lib/settings.ts counts on it)
MAX_POLL_ATTEMPTS = contract.limit("compactionPollMaxAttempts")
# launch and SSM registration, attaching, the new snapshots, teardown and report
OTHER_PHASES_SECONDS = 2 * 3600
# the Command document's TimeoutSeconds parameter default (ssm-documents/compact-volumes.yaml)
DOCUMENT_TIMEOUT_SECONDS = contract.limit("documentTimeoutSeconds")


@dataclass(frozen=True)
class Sizing:
    instance_types: list[str]
    compaction_poll: CompactionPoll
    budget_seconds: int


def size_class(bytes_to_copy: int) -> SizeClass:
    for size in SIZE_CLASSES:
        if size.max_gib is None or bytes_to_copy <= size.max_gib * GIB:
            return size
    raise AssertionError("the last size class has no limit")


def copy_rate(baseline_mbps: int, config: Config) -> float:
    """Bytes per second one volume pair is copied at, conservatively."""
    link = baseline_mbps * 1_000_000 / 8 / 2  # read from the source + write to the target
    volumes = config.source_volume_throughput * MIB  # gp3 throughput of source and target
    return min(link, volumes)


def copy_seconds(bytes_to_read: int, types: Sequence[str], verify: bool, config: Config) -> int:
    """A dry run's estimate of the copy's duration: the bytes to read at the copy rate of the
    slowest of the planned types (twice with verify), without FIXED_OVERHEAD or SAFETY_FACTOR."""
    baseline = min(BASELINE_EBS_MBPS.get(t, min(BASELINE_EBS_MBPS.values())) for t in types)
    return math.ceil(bytes_to_read * (2 if verify else 1) / copy_rate(baseline, config))


def budget_seconds(bytes_to_copy: int, rate: float, verify: bool) -> int:
    passes = 2 if verify else 1  # verify reads source and target again
    return math.ceil(FIXED_OVERHEAD_SECONDS + bytes_to_copy / rate * passes * SAFETY_FACTOR)


def poll(budget: int, config: Config) -> CompactionPoll:
    interval = max(config.compaction_poll_seconds, math.ceil(budget / MAX_POLL_ATTEMPTS))
    return {"intervalSeconds": interval, "maxAttempts": max(1, math.ceil(budget / interval))}


def plan(
    bytes_to_copy: int, verify: bool, config: Config, refuse: bool = True, dry_run: bool = False
) -> Sizing:
    """Instance types and compaction bound for the job; JobTooLarge when it cannot fit, unless
    refuse is false (a plan of pending sources, whose bytes are only an upper bound). A dry run
    is never refused and launches the smallest types (it reads metadata only; without the
    INSTANCE_TYPES setting): its bound stays the copy's, a safe one for the metadata reads."""
    if config.instance_types:
        # the user's setting wins; its rate is that of its slowest type (unknown: the slowest
        # type of the table, as conservative as it gets without DescribeInstanceTypes)
        types: Sequence[str] = config.instance_types
        baseline = min(BASELINE_EBS_MBPS.get(t, min(BASELINE_EBS_MBPS.values())) for t in types)
    else:
        size = size_class(bytes_to_copy)
        types = size.types(config.architecture)
        baseline = size.baseline_mbps(config.architecture)
    budget = budget_seconds(bytes_to_copy, copy_rate(baseline, config), verify)
    available = config.state_machine_timeout_minutes * 60 - OTHER_PHASES_SECONDS
    if dry_run and not config.instance_types:
        types = SIZE_CLASSES[0].types(config.architecture)
    elif refuse and not dry_run and budget > min(available, DOCUMENT_TIMEOUT_SECONDS):
        if budget > DOCUMENT_TIMEOUT_SECONDS:
            bound = f"the Command document's timeout of {DOCUMENT_TIMEOUT_SECONDS / 3600:.0f} h"
            fix = ""
        else:
            bound = (
                f"the {available / 3600:.1f} h the state machine's timeout "
                f"({config.state_machine_timeout_minutes} min) leaves after "
                f"{OTHER_PHASES_SECONDS // 3600} h for the other phases"
            )
            needed = math.ceil((budget + OTHER_PHASES_SECONDS) / 60)
            fix = f"raise the stack setting stateMachineTimeoutMinutes to at least {needed}, "
        bigger = (
            "set larger instanceTypes (or leave it empty to size by the job), "
            if config.instance_types
            else ""
        )
        raise JobTooLarge(
            f"copying {bytes_to_copy / GIB:,.0f} GiB{' and verifying it' if verify else ''} on "
            f"{', '.join(types)} (baseline EBS bandwidth {baseline} Mbps) may take up to "
            f"{budget / 3600:.1f} h, more than {bound}: {fix}pass verify false, "
            f"{bigger}"
            "or split the job (compact an AMI's volumes as separate snapshot jobs)"
        )
    return Sizing(list(types), poll(budget, config), budget)
