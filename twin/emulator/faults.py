"""Fault switches: each one makes the emulator misbehave the way AWS does in one failure case."""

from __future__ import annotations

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
        raise ValueError(f"unknown fault {name!r}; choose one of {', '.join(FAULTS)}")
