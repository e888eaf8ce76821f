"""Where the EBS emulator (devkit/ebs/api.py) keeps snapshots and their blocks: a Store.

MemoryStore keeps blocks in a dict (the data-plane tests and the bench); the twin's store keeps
them in its EC2 snapshot records and sparse files (twin/emulator/ebs_store.py), so that
DescribeSnapshots, CreateVolume and RegisterImage see a direct snapshot like any other.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Described:
    status: str  # pending | completed | error
    size_gib: int
    encrypted: bool = False
    kms_key_id: str | None = None


@dataclass(frozen=True)
class NewSnapshot:
    size_gib: int
    description: str
    tags: dict[str, str]
    encrypted: bool
    kms_key_id: str | None
    parent_id: str | None  # the new snapshot starts with this completed snapshot's blocks


class Store(Protocol):
    account: str
    lock: threading.RLock  # held by the emulator around every change; the store's users share it

    def describe(self, snapshot_id: str) -> Described | None: ...
    def pending(self) -> int: ...
    def create(self, new: NewSnapshot) -> tuple[str, float]:
        """(snapshot id, start time in epoch seconds) of a new `pending` snapshot."""
        ...

    def write(self, snapshot_id: str, index: int, data: bytes) -> None: ...
    def holds(self, snapshot_id: str, index: int) -> bool: ...
    def read(self, snapshot_id: str, index: int) -> bytes: ...
    def written(self, snapshot_id: str) -> list[int]:
        """The indexes of the blocks the snapshot holds (ever written, zeros included), sorted."""
        ...

    def progress(self, snapshot_id: str, percent: int) -> None: ...
    def sealing(self, snapshot_id: str) -> None:
        """CompleteSnapshot was accepted: the asynchronous seal begins."""
        ...

    def sealed(self, snapshot_id: str) -> None:
        """The seal has ended: the snapshot is `completed` (or, by a fault, `error`)."""
        ...

    def failed(self, snapshot_id: str, message: str) -> None: ...


@dataclass
class MemorySnapshot:
    snapshot_id: str
    size_gib: int
    new: NewSnapshot
    status: str = "pending"
    blocks: dict[int, bytes] = field(default_factory=dict)
    state_message: str = ""


class MemoryStore:
    """Blocks in memory. keep_data=False keeps only which blocks were written (the bench writes
    gigabytes and reads back only their digests, which the emulator keeps anyway)."""

    def __init__(self, account: str = "111122223333", keep_data: bool = True) -> None:
        self.account = account
        self.keep_data = keep_data
        self.lock = threading.RLock()
        self.snapshots: dict[str, MemorySnapshot] = {}

    def describe(self, snapshot_id: str) -> Described | None:
        snap = self.snapshots.get(snapshot_id)
        if snap is None:
            return None
        return Described(snap.status, snap.size_gib, snap.new.encrypted, snap.new.kms_key_id)

    def pending(self) -> int:
        return sum(1 for s in self.snapshots.values() if s.status == "pending")

    def create(self, new: NewSnapshot) -> tuple[str, float]:
        snap = MemorySnapshot(f"snap-{uuid.uuid4().hex[:17]}", new.size_gib, new)
        if new.parent_id:
            snap.blocks = dict(self.snapshots[new.parent_id].blocks)
        self.snapshots[snap.snapshot_id] = snap
        return snap.snapshot_id, time.time()

    def write(self, snapshot_id: str, index: int, data: bytes) -> None:
        self.snapshots[snapshot_id].blocks[index] = data if self.keep_data else b""

    def holds(self, snapshot_id: str, index: int) -> bool:
        return index in self.snapshots[snapshot_id].blocks

    def read(self, snapshot_id: str, index: int) -> bytes:
        return self.snapshots[snapshot_id].blocks[index]

    def written(self, snapshot_id: str) -> list[int]:
        return sorted(self.snapshots[snapshot_id].blocks)

    def progress(self, snapshot_id: str, percent: int) -> None:
        pass  # nothing reads it back from memory

    def sealing(self, snapshot_id: str) -> None:
        pass  # the emulator's settle() ends the seal after Quirks.seal_seconds

    def sealed(self, snapshot_id: str) -> None:
        self.snapshots[snapshot_id].status = "completed"

    def failed(self, snapshot_id: str, message: str) -> None:
        snap = self.snapshots[snapshot_id]
        snap.status, snap.state_message = "error", message

    def forget(self) -> None:
        self.snapshots.clear()
