"""The EBS direct APIs in the twin: the one EBS emulator (devkit/ebs/api.py) over the twin's own
store, its EC2 snapshot records and their sparse files (blockstore.py). A snapshot written with
StartSnapshot/PutSnapshotBlock/CompleteSnapshot is an ordinary EC2 snapshot, so DescribeSnapshots,
CreateVolume and RegisterImage treat it like one CreateSnapshot made, and ListSnapshotBlocks and
GetSnapshotBlock read any of the twin's snapshots. moto's own `ebs` backend (blocks in memory,
unknown to EC2: getmoto/moto#6523) is left with ListChangedBlocks only: the injection middleware
hands every other EBS direct request to `answer()` here.

Which blocks a snapshot holds: a 512 KiB block is held when any byte of it is data in the
snapshot's file per SEEK_DATA/SEEK_HOLE (devkit/chunks.written_chunks), not when it holds non-zero
bytes: the twin writes a snapshot file by copying the volume's allocated extents, and a put writes
its block, so a block written with zeros is still listed, as EBS lists the blocks that were
written. A direct snapshot's VolumeId is vol-ffffffff, the placeholder AWS shows for copied
snapshots (undocumented for direct ones; no caller may rely on a VolumeId).

The twin's Faults (faults.py, Faults.ebs_*) are the emulator's Quirks, AWS's behaviours on by
default; throttle@STATE is injection.py's. A completed direct snapshot turns `completed` after
state.SNAPSHOT_PENDING_POLLS DescribeSnapshots answers, as a CreateSnapshot snapshot does
(FAULT=snapshot-error makes it `error`), or COMPLETE_SECONDS after CompleteSnapshot for clients
that never describe it; Faults.ebs_seal_seconds makes a seal last at least that long, polls or
not.
"""

from __future__ import annotations

import datetime
from typing import Any

from moto.ec2.models import ec2_backends
from moto.ec2.models.elastic_block_store import Snapshot, Volume
from moto.ec2.utils import random_snapshot_id

from devkit.chunks import copy_image
from devkit.disks.layout import create_sparse
from devkit.ebs import wire
from devkit.ebs.api import Emulator, operation
from devkit.ebs.quirks import Quirks
from devkit.ebs.store import Described, NewSnapshot

from . import consistency
from . import state as st
from .blockstore import EBS_BLOCK, holds_block, written_chunks
from .faults import Faults

COMPLETE_SECONDS = 2.0
DIRECT_VOLUME_ID = "vol-ffffffff"


def quirks_of(faults: Faults) -> Quirks:
    """The emulator's quirks for the twin's current Faults."""
    return Quirks(
        max_in_flight=faults.ebs_max_puts_in_flight,
        latency=faults.ebs_put_latency,
        not_found_requests=faults.ebs_not_found_requests,
        seal_seconds=max(COMPLETE_SECONDS, faults.ebs_seal_seconds),
        seal_not_found=faults.ebs_seal_not_found,
        transient_put_failures=faults.ebs_transient_put_failures,
        lost_completions=faults.ebs_lost_completions,
        strict_completion=faults.ebs_strict_completion,
        snapshot_puts_per_second=faults.ebs_snapshot_puts_per_second,
        account_puts_per_second=faults.ebs_account_puts_per_second,
        pending_snapshots=faults.ebs_pending_snapshots,
        throttled_puts=faults.ebs_throttled_puts,
        corrupt_puts=faults.ebs_corrupt_puts,
    )


class Ec2Store:
    """The emulator's Store over moto's EC2 snapshot records and the twin's sparse files."""

    def __init__(self, emu: st.EmulatorState, backend: Any) -> None:
        self.emu, self.backend = emu, backend
        self.account: str = backend.account_id
        self.lock = emu.lock

    def describe(self, snapshot_id: str) -> Described | None:
        snapshot = self.backend.snapshots.get(snapshot_id)
        if snapshot is None or snapshot_id not in self.emu.snapshot_files:
            return None
        size = int(snapshot.volume.size)
        return Described(str(snapshot.status), size, bool(snapshot.encrypted), snapshot.kms_key_id)

    def pending(self) -> int:
        return sum(1 for s in self.backend.snapshots.values() if s.status == "pending")

    def create(self, new: NewSnapshot) -> tuple[str, float]:
        emu, backend = self.emu, self.backend
        volume = Volume(backend, DIRECT_VOLUME_ID, new.size_gib, None, encrypted=new.encrypted,
                        kms_key_id=new.kms_key_id)  # type: ignore[abstract]  # fmt: skip
        snapshot: Any = Snapshot(backend, random_snapshot_id(), volume, new.description,
                                 encrypted=new.encrypted, kms_key_id=new.kms_key_id)  # fmt: skip
        snapshot.status, snapshot.twin_progress = "pending", "0%"
        path = emu.workdir / "snapshots" / f"{snapshot.id}.img"
        if new.parent_id:
            copy_image(emu.snapshot_files[new.parent_id], path)
            with open(path, "r+b") as f:
                f.truncate(new.size_gib * st.GIB)
        else:
            create_sparse(path, new.size_gib * st.GIB)
        backend.snapshots[snapshot.id] = snapshot
        if new.tags:
            backend.create_tags([snapshot.id], new.tags)
        emu.snapshot_files[snapshot.id] = path
        emu.snapshots_created.append(snapshot.id)
        consistency.mark_fresh(emu, snapshot.id)
        return snapshot.id, snapshot.start_time.replace(tzinfo=datetime.UTC).timestamp()

    def write(self, snapshot_id: str, index: int, data: bytes) -> None:
        with open(self.emu.snapshot_files[snapshot_id], "r+b") as f:
            f.seek(index * EBS_BLOCK)
            f.write(data)

    def holds(self, snapshot_id: str, index: int) -> bool:
        return holds_block(self.emu.snapshot_files[snapshot_id], index)

    def read(self, snapshot_id: str, index: int) -> bytes:
        with open(self.emu.snapshot_files[snapshot_id], "rb") as f:
            f.seek(index * EBS_BLOCK)
            return f.read(EBS_BLOCK).ljust(EBS_BLOCK, b"\0")

    def written(self, snapshot_id: str) -> list[int]:
        return sorted(written_chunks(self.emu.snapshot_files[snapshot_id]))

    def progress(self, snapshot_id: str, percent: int) -> None:
        self.backend.snapshots[snapshot_id].twin_progress = f"{percent}%"

    def sealing(self, snapshot_id: str) -> None:
        self.emu.snapshot_polls[snapshot_id] = 0  # completes as a CreateSnapshot's (ec2_snapshots)

    def sealed(self, snapshot_id: str) -> None:
        self.emu.snapshot_polls.pop(snapshot_id, None)
        snapshot = self.backend.snapshots[snapshot_id]
        if self.emu.faults.snapshot_error:
            snapshot.status = "error"
            snapshot.state_message = "twin fault snapshot-error: the snapshot failed to complete"
            return
        snapshot.status, snapshot.twin_progress = "completed", "100%"
        path = self.emu.snapshot_files[snapshot_id]
        snapshot.full_snapshot_size_in_bytes = len(written_chunks(path)) * EBS_BLOCK

    def failed(self, snapshot_id: str, message: str) -> None:
        snapshot = self.backend.snapshots[snapshot_id]
        snapshot.status, snapshot.state_message = "error", message


def emulator(emu: st.EmulatorState, backend: Any) -> Emulator:
    """The EBS emulator over the twin's EC2 backend, with the Faults the twin runs with now."""
    store = Ec2Store(emu, backend)
    return Emulator(store, quirks_of(emu.faults), emu.direct, backend.region_name)


def _request(environ: dict[str, Any]) -> wire.Request:
    headers = {
        key[5:].lower().replace("_", "-"): str(value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    }
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    return wire.Request(
        environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
        environ.get("QUERY_STRING", ""), headers, body,
    )  # fmt: skip


def answer(environ: dict[str, Any], account: str, region: str) -> wire.WsgiResponse | None:
    """(status line, headers, body) of one EBS direct request, None for one the emulator leaves
    to moto (ListChangedBlocks) or when no twin is active."""
    emu = st.ACTIVE
    method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
    if emu is None or operation(method, path) is None:
        return None
    answered = emulator(emu, ec2_backends[account][region]).handle(_request(environ))
    if answered is None:
        return None
    status, headers, body = answered
    return wire.status_line(status), headers, body


def settle(emu: st.EmulatorState, backend: Any, now: float | None = None) -> list[str]:
    """Time passes for direct snapshots (Emulator.settle); the ids that turned `error`."""
    return emulator(emu, backend).settle(now)


def still_sealing(emu: st.EmulatorState, backend: Any, snapshot_id: str) -> bool:
    """Faults.ebs_seal_seconds: DescribeSnapshots polls do not end a long seal sooner."""
    return bool(emu.faults.ebs_seal_seconds) and emulator(emu, backend).still_sealing(snapshot_id)
