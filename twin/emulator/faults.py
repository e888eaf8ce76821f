"""Fault switches: each one makes the emulator (or the runner) misbehave the way AWS does.

Two ways to name a fault:
- the grammar `KIND@STATE`, STATE being any Task state of the synthesized main definition:
  `error` (the task's Lambda raises on its first call in that state), `throttle` (every AWS call
  the Lambda makes in that state is answered with the service's throttling error, for more
  requests than botocore retries), `abort` (StopExecution while in that state; the Lambda call in
  flight still completes), `lost` (the transfer instance is terminated like a Spot interruption
  when the state is entered, if one of this execution exists);
- the seven names of FAULTS, kept as aliases with their historical behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FAULTS = (
    "spot-capacity",
    "no-capacity",
    "command-fails",
    "instance-lost",
    "snapshot-error",
    "throttle",
    "bad-input",
)
KINDS = ("error", "throttle", "abort", "lost")
# botocore's standard retry mode with max_attempts 5 (compactor/aws.py) makes 6 attempts per call
# (max_attempts counts retries: total_max_attempts = max_attempts + 1); throttling the first 8
# requests makes at least one call fail in the Lambda after botocore's own retries.
THROTTLED_REQUESTS = 8


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


def parse(text: str | None, task_states: Iterable[str] | None = None) -> StateFault | str | None:
    """A FAULT value: None (no fault), an alias name, or a StateFault. With task_states, the
    state must be one of them (a clear error lists them)."""
    if text in (None, "", "none"):
        return None
    assert text is not None
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
    # throttle@STATE: requests sent by a Lambda while in this Task state (X-Twin-State header)
    # are answered with the service's throttling error, the first `throttled_requests` of them.
    throttle_state: str | None = None
    throttled_requests: int = THROTTLED_REQUESTS

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
        raise FaultError(f"unknown fault {name!r}; choose one of {', '.join(FAULTS)}")

    @classmethod
    def of(cls, fault: StateFault | str | None) -> Faults:
        """The emulator-side switches of a parsed FAULT."""
        if isinstance(fault, StateFault):
            return cls(throttle_state=fault.state if fault.kind == "throttle" else None)
        return cls.named(fault)
