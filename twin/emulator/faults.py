"""Fault switches: each one makes the emulator (or the runner) misbehave the way AWS does.

Two ways to name a fault:
- the grammar `KIND@STATE`, STATE being any Task state of the synthesized main definition:
  `error` (the task's Lambda raises on its first call in that state), `throttle` (every AWS call
  the Lambda makes in that state is answered with the service's throttling error, for more
  requests than botocore retries), `abort` (StopExecution while in that state; the Lambda call in
  flight still completes), `lost` (the transfer instance is terminated like a Spot interruption
  when the state is entered, if one of this execution exists);
- the names of FAULTS, kept as aliases with their historical behaviour, and three for the EBS
  direct writes of `target: "snapshot"`: `put-throttled` (puts throttled and refused beyond a
  concurrency limit: the data plane rides through), `put-corrupted` (every put's data corrupted
  in transit: its checksum never matches, no snapshot is ever completed), `pending-delete-refused`
  (the command fails after StartSnapshot and EC2 refuses DeleteSnapshot of the pending direct
  snapshot: teardown leaves it to time out), and EBS_BEHAVIOURS: AWS's EBS direct behaviours,
  harsh in every run already, made stronger for one run.

Several `KIND@STATE` faults join with `+` (`error@Report+error@Report with warnings`): each one
fires once, at the first call in its own state, whatever the order the run reaches them in; this
is how a fault reaches a state on a recovery path (an "opener" fault leads the run there). The
aliases do not combine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..limits import limit

# AWS's EBS direct behaviours each made stronger than the default for one whole run (the sweep
# runs each once, docs/sweep.md): `ebs-not-found` (far more "snapshot does not exist" answers
# after StartSnapshot), `ebs-long-seal` (CompleteSnapshot's seal takes LONG_SEAL_SECONDS, reads
# answer ResourceNotFound meanwhile), `ebs-account-quota` (the account's PutSnapshotBlock quota at
# ACCOUNT_PUTS_PER_SECOND while a second run in the account puts at the same time, twin/
# second_run.py), `credentials-near-expiry` (the instance's role credentials from instance
# metadata, each set valid CREDENTIALS_SECONDS, an expired one refused: instance_metadata.py).
EBS_BEHAVIOURS = ("ebs-not-found", "ebs-long-seal", "ebs-account-quota", "credentials-near-expiry")
FAULTS = (
    "spot-capacity",
    "no-capacity",
    "command-fails",
    "instance-lost",
    "snapshot-error",
    "throttle",
    "bad-input",
    "put-throttled",
    "put-corrupted",
    "pending-delete-refused",
    *EBS_BEHAVIOURS,
)
KINDS = ("error", "throttle", "abort", "lost")
# botocore's standard retry mode with max_attempts 5 (compactor/aws.py) makes 6 attempts per call
# (max_attempts counts retries: total_max_attempts = max_attempts + 1); throttling the first 8
# requests makes at least one call fail in the Lambda after botocore's own retries.
THROTTLED_REQUESTS = 8
# FAULT=put-throttled: the first puts answered RequestThrottledException
PUTS_THROTTLED = 25
# EBS direct as AWS behaves, on by default (Faults.api_only() turns them off for tests of the
# API's shape): the first requests after StartSnapshot find no snapshot (coldsnap #43: up to ~2
# minutes against AWS; counted here, so that every run meets it whatever its timing) ...
NOT_FOUND_REQUESTS = 3
# ... and EBS's quotas (contract/limits.json, which docs/batch.md sizes a batch by):
# PutSnapshotBlock 1,000 puts per second per snapshot and per account; at most 100 snapshots
# pending in the account (StartSnapshot beyond: ServiceQuotaExceededException).
PUTS_PER_SECOND = limit("ebsPutsPerSecondPerAccount")
PENDING_SNAPSHOTS = limit("ebsPendingSnapshotsPerAccount")
# the EBS_BEHAVIOURS' strengths
NOT_FOUND_REQUESTS_LONG = 40
LONG_SEAL_SECONDS = 20.0
ACCOUNT_PUTS_PER_SECOND = 20
CREDENTIALS_SECONDS = 17.0


class FaultError(ValueError):
    """A FAULT the twin cannot apply (unknown name, kind or state)."""


@dataclass(frozen=True)
class StateFault:
    """One `KIND@STATE` fault."""

    kind: str
    state: str

    def __str__(self) -> str:
        return f"{self.kind}@{self.state}"

    def to_job(self) -> dict[str, str]:
        return {"kind": self.kind, "state": self.state}


@dataclass(frozen=True)
class FaultList:
    """Several `KIND@STATE` faults (`A+B`), each applied once, independently of the others."""

    faults: tuple[StateFault, ...]

    def __str__(self) -> str:
        return "+".join(str(f) for f in self.faults)


def state_faults(fault: StateFault | FaultList | str | None) -> list[StateFault]:
    """The `KIND@STATE` faults of a parsed FAULT, in the order given (none for an alias)."""
    if isinstance(fault, StateFault):
        return [fault]
    if isinstance(fault, FaultList):
        return list(fault.faults)
    return []


def parse(
    text: str | None, task_states: Iterable[str] | None = None
) -> StateFault | FaultList | str | None:
    """A FAULT value: None (no fault), an alias name, a StateFault, or a FaultList (`A+B`, two or
    more StateFaults). With task_states, each state must be one of them (a clear error lists
    them)."""
    if text in (None, "", "none"):
        return None
    assert text is not None
    if "+" in text:
        states = list(task_states) if task_states is not None else None
        parts = [part.strip() for part in text.split("+")]
        faults: list[StateFault] = []
        for part in parts:
            if "@" not in part:
                raise FaultError(
                    f"FAULT={text}: {part!r} is not KIND@STATE; only KIND@STATE faults combine "
                    f"with + (the aliases {', '.join(FAULTS)} stand alone)"
                )
            one = parse(part, states)
            assert isinstance(one, StateFault)
            if one in faults:
                raise FaultError(f"FAULT={text}: {one} is given twice")
            faults.append(one)
        return FaultList(tuple(faults))
    if "@" not in text:
        if text in FAULTS:
            return text
        raise FaultError(
            f"FAULT={text}: choose KIND@STATE (KIND one of {', '.join(KINDS)}) "
            f"or one of {', '.join(FAULTS)}"
        )
    kind, _, state = text.partition("@")
    if kind not in KINDS:
        raise FaultError(f"FAULT={text}: KIND {kind!r} is not one of {', '.join(KINDS)}")
    if task_states is not None:
        states = list(task_states)
        if state not in states:
            raise FaultError(
                f"FAULT={text}: {state!r} is not a Task state of the synthesized definition; "
                f"its Task states are: {', '.join(states)}"
            )
    elif not state:
        raise FaultError(f"FAULT={text}: name a Task state after the @")
    return StateFault(kind, state)


@dataclass
class Faults:
    # RunInstances with Spot market options answers InsufficientInstanceCapacity this many times.
    spot_capacity_failures: int = 0
    # Every Spot request fails (and, with ALLOW_ON_DEMAND=false, so does the job).
    no_spot_capacity: bool = False
    # The first transfer instance's source volume has no device node: the document's program fails.
    hide_source_device: bool = False
    # The first transfer instance is terminated (Spot interruption) while its command runs.
    interrupt_first_instance: bool = False
    # Snapshots created by the workflow end in state "error".
    snapshot_error: bool = False
    # throttle@STATE: requests sent by a Lambda while in one of these Task states (X-Twin-State
    # header) are answered with the service's throttling error, the first `throttled_requests`
    # of each state.
    throttle_states: tuple[str, ...] = ()
    throttled_requests: int = THROTTLED_REQUESTS
    # EBS direct (ebs_direct.py, the emulator's Quirks): the first `ebs_throttled_puts`
    # PutSnapshotBlock requests are answered RequestThrottledException; more than
    # `ebs_max_puts_in_flight` EBS direct requests being served at once (0: no limit) are answered
    # ConcurrentLimitExceededException; each takes `ebs_put_latency` seconds (so that puts
    # overlap as they do against AWS).
    ebs_throttled_puts: int = 0
    ebs_max_puts_in_flight: int = 0
    ebs_put_latency: float = 0.0
    # DeleteSnapshot of a direct snapshot still `pending` (started, not completed, not timed out)
    # is refused with IncorrectState: AWS does not document whether such a snapshot may be
    # deleted, so the workflow must cope with both answers (teardown's leftToTimeOut).
    refuse_pending_direct_delete: bool = False
    # The first `ebs_corrupt_puts` PutSnapshotBlock bodies arrive with a byte flipped (corrupted
    # in transit): the checksum the client sent no longer matches, the put is refused.
    ebs_corrupt_puts: int = 0
    # AWS's EBS direct behaviours (devkit/ebs/quirks.py), harsh by default:
    # the first `ebs_not_found_requests` puts/completions of a new direct snapshot answer
    # ResourceNotFoundException, as AWS does for up to ~2 minutes after StartSnapshot;
    ebs_not_found_requests: int = NOT_FOUND_REQUESTS
    # while EBS seals a completed snapshot, ListSnapshotBlocks and GetSnapshotBlock answer
    # ResourceNotFoundException (coldsnap #141), not only ValidationException; the seal lasts at
    # least `ebs_seal_seconds` (a seal that takes long);
    ebs_seal_not_found: bool = True
    ebs_seal_seconds: float = 0.0
    # the first `ebs_transient_put_failures` puts answer ValidationException
    # INVALID_PARAMETER_VALUE "Failed to read block data" (nanovms/ops #1268): transient;
    ebs_transient_put_failures: int = 1
    # the first `ebs_lost_completions` accepted CompleteSnapshot answers are lost (the snapshot
    # seals, the client sees InternalServerException), and a CompleteSnapshot of a snapshot
    # already completed is refused (ValidationException INVALID_SNAPSHOT_ID): the client's retry
    # must not fail a good snapshot; a Checksum with ChangedBlocksCount 0 is refused (undocumented:
    # the harsh answer);
    ebs_lost_completions: int = 1
    ebs_strict_completion: bool = True
    # PutSnapshotBlock's quota, puts accepted per second: per snapshot and per account (shared by
    # every run against this emulator), answered RequestThrottledException beyond it.
    ebs_snapshot_puts_per_second: int = PUTS_PER_SECOND
    ebs_account_puts_per_second: int = PUTS_PER_SECOND
    ebs_pending_snapshots: int = PENDING_SNAPSHOTS
    # 0: the instance's role credentials come as environment credentials that never expire; > 0:
    # from the twin's instance metadata, each set valid this many seconds, EBS refusing an
    # expired one (403 ExpiredTokenException; instance_metadata.py)
    ebs_credentials_seconds: float = 0.0

    @classmethod
    def api_only(cls, **switches: object) -> Faults:
        """No AWS quirks of the EBS direct APIs (tests of the API's shape), then ``switches``."""
        calm: dict[str, object] = dict(
            ebs_not_found_requests=0,
            ebs_seal_not_found=False,
            ebs_transient_put_failures=0,
            ebs_lost_completions=0,
            ebs_strict_completion=False,
        )
        return cls(**{**calm, **switches})  # type: ignore[arg-type]

    @classmethod
    def named(cls, name: str | None) -> Faults:
        """The emulator-side switches of a FAULT name (throttle and bad-input live elsewhere)."""
        if name in (None, "", "none", "throttle", "bad-input"):
            return cls()
        if name == "spot-capacity":
            return cls(spot_capacity_failures=2)
        if name == "no-capacity":
            return cls(no_spot_capacity=True)
        if name == "command-fails":
            return cls(hide_source_device=True)
        if name == "instance-lost":
            return cls(interrupt_first_instance=True)
        if name == "snapshot-error":
            return cls(snapshot_error=True)
        if name == "put-throttled":
            return cls(ebs_throttled_puts=PUTS_THROTTLED, ebs_max_puts_in_flight=2,
                       ebs_put_latency=0.02)  # fmt: skip
        if name == "put-corrupted":
            return cls(ebs_corrupt_puts=10**9)
        if name == "pending-delete-refused":
            return cls(hide_source_device=True, refuse_pending_direct_delete=True)
        if name == "ebs-not-found":
            return cls(ebs_not_found_requests=NOT_FOUND_REQUESTS_LONG)
        if name == "ebs-long-seal":
            return cls(ebs_seal_seconds=LONG_SEAL_SECONDS)
        if name == "ebs-account-quota":
            return cls(ebs_account_puts_per_second=ACCOUNT_PUTS_PER_SECOND)
        if name == "credentials-near-expiry":
            return cls(ebs_credentials_seconds=CREDENTIALS_SECONDS)
        raise FaultError(f"unknown fault {name!r}; choose one of {', '.join(FAULTS)}")

    @classmethod
    def of(cls, fault: StateFault | FaultList | str | None) -> Faults:
        """The emulator-side switches of a parsed FAULT."""
        if isinstance(fault, StateFault | FaultList):
            throttled = tuple(f.state for f in state_faults(fault) if f.kind == "throttle")
            return cls(throttle_states=throttled)
        return cls.named(fault)
