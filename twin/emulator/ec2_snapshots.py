"""EBS snapshots as point-in-time copies of a volume's file that stay `pending` for a few polls
and report the size of what they hold, and Fast Snapshot Restore's states per zone."""

from __future__ import annotations

import datetime
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_block_store import EBSBackend, Snapshot
from moto.ec2.responses.elastic_block_store import ElasticBlockStore

from devkit.chunks import copy_image

from . import ebs_direct, encryption, patching
from . import state as st
from .blockstore import EBS_BLOCK, written_chunks

_orig: dict[str, Any] = {}


# --- snapshots ------------------------------------------------------------------------------


def _progress(self: Snapshot) -> str:
    return getattr(self, "twin_progress", "100%")


def _create_snapshot(self: EBSBackend, volume_id: str, description: str, *a: Any, **kw: Any) -> Any:
    snapshot = _orig["create_snapshot"](self, volume_id, description, *a, **kw)
    emu = st.ACTIVE
    # moto's own AMIs make placeholder snapshots (from_ami): those stay plain moto objects.
    if emu is not None and volume_id in emu.volume_files and not kw.get("from_ami"):
        path = emu.workdir / "snapshots" / f"{snapshot.id}.img"
        # The snapshot is the volume's written blocks at this moment (point in time); a volume
        # filled with its key's bytes (encryption.py) says which blocks were written.
        volume_file = emu.volume_files[volume_id]
        blocks = encryption.snapshot_blocks(volume_file, emu.volume_origins.get(volume_id))
        if blocks is None:
            copy_image(volume_file, path)
        else:
            encryption.copy_blocks(volume_file, blocks, path)
        volume = self.get_volume(volume_id)
        if volume.encrypted:
            snapshot.kms_key_id = volume.kms_key_id  # moto keeps only the flag
        with emu.lock:
            emu.snapshot_files[snapshot.id] = path
            emu.snapshot_polls[snapshot.id] = 0
        snapshot.status = "pending"
        snapshot.twin_progress = "0%"
    return snapshot


def _advance_snapshots(emu: st.EmulatorState, backend: EBSBackend) -> None:
    with emu.lock:
        for snapshot_id, polls in list(emu.snapshot_polls.items()):
            snapshot: Any = backend.snapshots.get(snapshot_id)
            if snapshot is None or snapshot.status != "pending":
                continue
            if ebs_direct.still_sealing(emu, backend, snapshot_id):
                continue  # Faults.ebs_seal_seconds: polls do not end a long seal sooner
            polls += 1
            emu.snapshot_polls[snapshot_id] = polls
            if polls < st.SNAPSHOT_PENDING_POLLS:
                snapshot.twin_progress = f"{100 * polls // st.SNAPSHOT_PENDING_POLLS}%"
                continue
            if emu.faults.snapshot_error:
                snapshot.status = "error"
                snapshot.state_message = (
                    "twin fault snapshot-error: the snapshot failed to complete"
                )
                continue
            snapshot.status = "completed"
            snapshot.twin_progress = "100%"
            snapshot.full_snapshot_size_in_bytes = snapshot_written_bytes(emu, snapshot_id)


def snapshot_written_bytes(emu: st.EmulatorState, snapshot_id: str) -> int:
    return len(written_chunks(emu.snapshot_files[snapshot_id])) * EBS_BLOCK


def _describe_snapshots(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    emu = st.ACTIVE
    if emu is not None:
        ebs_direct.settle(emu, self)
        _advance_snapshots(emu, self)
    return _orig["describe_snapshots"](self, *args, **kwargs)


def _refuse_pending_direct(emu: st.EmulatorState, backend: EBSBackend, snapshot_id: str) -> None:
    """Faults.refuse_pending_direct_delete: a direct snapshot still `pending` cannot be deleted
    (AWS documents neither answer; the twin can give both)."""
    if not emu.faults.refuse_pending_direct_delete or snapshot_id not in emu.direct.snapshots:
        return
    ebs_direct.settle(emu, backend)  # one past its Timeout is `error` by now
    snapshot: Any = backend.snapshots.get(snapshot_id)
    if snapshot is not None and snapshot.status == "pending":
        with emu.lock:
            emu.direct.deletes_refused += 1
        raise EC2ClientError(
            "IncorrectState",
            f"The snapshot '{snapshot_id}' is in the pending state and cannot be deleted.",
        )


def _delete_snapshot(self: EBSBackend, snapshot_id: str) -> Any:
    emu = st.ACTIVE
    if emu is not None:
        _refuse_pending_direct(emu, self, snapshot_id)
    snapshot = _orig["delete_snapshot"](self, snapshot_id)
    if emu is not None:
        with emu.lock:
            path = emu.snapshot_files.pop(snapshot_id, None)
            emu.snapshot_polls.pop(snapshot_id, None)
            emu.direct.snapshots.pop(snapshot_id, None)
            for key in [k for k in emu.fsr if k[0] == snapshot_id]:
                del emu.fsr[key]
        if path is not None:
            path.unlink(missing_ok=True)
    return snapshot


# --- Fast Snapshot Restore -------------------------------------------------------------------

_FSR_STATES = ("enabling", "optimizing", "enabled")


def _fsr_item(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "SnapshotId": entry["SnapshotId"],
        "AvailabilityZone": entry["AvailabilityZone"],
        "State": entry["State"],
        "StateTransitionReason": entry["StateTransitionReason"],
        "OwnerId": entry["OwnerId"],
        f"{entry['State'].capitalize()}Time": entry["since"],
    }


def _enable_fast_snapshot_restores(self: ElasticBlockStore) -> ActionResult:
    emu = st.ACTIVE
    if emu is None:
        raise EC2ClientError("InvalidAction", "EnableFastSnapshotRestores needs the twin emulator")
    zones = self._get_param("AvailabilityZones", [])
    snapshot_ids = self._get_param("SourceSnapshotIds", [])
    backend = self.ec2_backend
    valid_zones = {z.name for z in backend.describe_availability_zones()}
    ok, failed = [], []
    for snapshot_id in snapshot_ids:
        for zone in zones:
            if snapshot_id not in backend.snapshots:
                failed.append((snapshot_id, zone, "InvalidSnapshot.NotFound"))
                continue
            if zone not in valid_zones:
                failed.append((snapshot_id, zone, "InvalidParameterValue"))
                continue
            with emu.lock:
                entry = emu.fsr.setdefault(
                    (snapshot_id, zone),
                    {
                        "SnapshotId": snapshot_id,
                        "AvailabilityZone": zone,
                        "State": "enabling",
                        "StateTransitionReason": "Client.UserInitiated",
                        "OwnerId": backend.account_id,
                        "since": datetime.datetime.now(datetime.UTC),
                        "polls": 0,
                    },
                )
            ok.append(_fsr_item(entry))
    unsuccessful = [
        {
            "SnapshotId": s,
            "FastSnapshotRestoreStateErrors": [
                {"AvailabilityZone": z, "Error": {"Code": code, "Message": f"{code}: {s} in {z}"}}
            ],
        }
        for s, z, code in failed
    ]
    return ActionResult({"Successful": ok, "Unsuccessful": unsuccessful})


def _describe_fast_snapshot_restores(self: ElasticBlockStore) -> ActionResult:
    emu = st.ACTIVE
    filters = {f["Name"]: f["Values"] for f in self._get_param("Filters", [])}
    items = []
    if emu is not None:
        with emu.lock:
            for entry in emu.fsr.values():
                if entry["State"] != "enabled":
                    entry["polls"] += 1
                    if entry["polls"] >= st.FSR_POLLS_PER_STATE:
                        entry["State"] = _FSR_STATES[_FSR_STATES.index(entry["State"]) + 1]
                        entry["StateTransitionReason"] = (
                            "Client.UserInitiated - Lifecycle state transition"
                        )
                        entry["since"] = datetime.datetime.now(datetime.UTC)
                        entry["polls"] = 0
                if _fsr_matches(entry, filters):
                    items.append(_fsr_item(entry))
    return ActionResult({"FastSnapshotRestores": items})


def _fsr_matches(entry: dict[str, Any], filters: dict[str, list[str]]) -> bool:
    keys = {
        "snapshot-id": "SnapshotId",
        "availability-zone": "AvailabilityZone",
        "state": "State",
        "owner-id": "OwnerId",
    }
    return all(entry[keys[name]] in values for name, values in filters.items() if name in keys)


def _disable_fast_snapshot_restores(self: ElasticBlockStore) -> ActionResult:
    emu = st.ACTIVE
    zones = self._get_param("AvailabilityZones", [])
    snapshot_ids = self._get_param("SourceSnapshotIds", [])
    ok = []
    if emu is not None:
        with emu.lock:
            for snapshot_id in snapshot_ids:
                for zone in zones:
                    entry = emu.fsr.pop((snapshot_id, zone), None)
                    if entry is not None:
                        entry = {**entry, "State": "disabling"}
                        ok.append(_fsr_item(entry))
    return ActionResult({"Successful": ok, "Unsuccessful": []})


def install() -> None:
    patching.install(
        _orig,
        {
            "create_snapshot": (EBSBackend, "create_snapshot", _create_snapshot),
            "describe_snapshots": (EBSBackend, "describe_snapshots", _describe_snapshots),
            "delete_snapshot": (EBSBackend, "delete_snapshot", _delete_snapshot),
            "progress": (Snapshot, "progress", property(_progress)),
            "enable_fsr": (
                ElasticBlockStore,
                "enable_fast_snapshot_restores",
                _enable_fast_snapshot_restores,
            ),
            "describe_fsr": (
                ElasticBlockStore,
                "describe_fast_snapshot_restores",
                _describe_fast_snapshot_restores,
            ),
            "disable_fsr": (
                ElasticBlockStore,
                "disable_fast_snapshot_restores",
                _disable_fast_snapshot_restores,
            ),
        },
    )
