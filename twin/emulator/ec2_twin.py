"""EC2 behaviour moto lacks: volumes backed by sparse files, snapshots that take time and report
their written size, Fast Snapshot Restore, capacity faults, Spot interruption, tag-change events."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_block_store import EBSBackend, Snapshot
from moto.ec2.models.instances import Instance, InstanceBackend
from moto.ec2.models.tags import TagBackend
from moto.ec2.responses.elastic_block_store import ElasticBlockStore

from . import state as st
from .blockstore import EBS_BLOCK, create_blank, sparse_copy, written_chunks

_orig: dict[str, Any] = {}


def _active() -> st.EmulatorState | None:
    return st.ACTIVE


# --- volumes -------------------------------------------------------------------------------


def _create_volume(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    volume = _orig["create_volume"](self, *args, **kwargs)
    emu = _active()
    if emu is not None:
        path = emu.workdir / "volumes" / f"{volume.id}.img"
        source = emu.snapshot_files.get(volume.snapshot_id or "")
        size = volume.size * st.GIB
        if source is not None:
            sparse_copy(source, path)
            if path.stat().st_size < size:
                # A volume larger than its snapshot: the extra space reads as never written.
                with open(path, "r+b") as f:
                    f.truncate(size)
        else:
            create_blank(path, size)
        with emu.lock:
            emu.volume_files[volume.id] = path
    return volume


def _delete_volume(self: EBSBackend, volume_id: str) -> Any:
    volume = _orig["delete_volume"](self, volume_id)
    emu = _active()
    if emu is not None:
        with emu.lock:
            path = emu.volume_files.pop(volume_id, None)
        if path is not None:
            path.unlink(missing_ok=True)
    return volume


# --- snapshots ------------------------------------------------------------------------------


def _progress(self: Snapshot) -> str:
    return getattr(self, "twin_progress", "100%")


def _create_snapshot(self: EBSBackend, volume_id: str, description: str, *a: Any, **kw: Any) -> Any:
    snapshot = _orig["create_snapshot"](self, volume_id, description, *a, **kw)
    emu = _active()
    # moto's own AMIs make placeholder snapshots (from_ami): those stay plain moto objects.
    if emu is not None and volume_id in emu.volume_files and not kw.get("from_ami"):
        path = emu.workdir / "snapshots" / f"{snapshot.id}.img"
        # The snapshot is the volume's blocks at this moment (point in time).
        sparse_copy(emu.volume_files[volume_id], path)
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
    emu = _active()
    if emu is not None:
        _advance_snapshots(emu, self)
    return _orig["describe_snapshots"](self, *args, **kwargs)


def _delete_snapshot(self: EBSBackend, snapshot_id: str) -> Any:
    snapshot = _orig["delete_snapshot"](self, snapshot_id)
    emu = _active()
    if emu is not None:
        with emu.lock:
            path = emu.snapshot_files.pop(snapshot_id, None)
            emu.snapshot_polls.pop(snapshot_id, None)
            for key in [k for k in emu.fsr if k[0] == snapshot_id]:
                del emu.fsr[key]
        if path is not None:
            path.unlink(missing_ok=True)
    return snapshot


# --- instances ------------------------------------------------------------------------------

_SPOT_CAPACITY_MESSAGE = (
    "There is no Spot capacity available that matches your request. (twin fault {fault})"
)


def _run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
    emu = _active()
    if emu is not None and kwargs.get("instance_market_options"):
        faults = emu.faults
        with emu.lock:
            fail = (
                faults.no_spot_capacity or emu.spot_failures_served < faults.spot_capacity_failures
            )
            if fail:
                emu.spot_failures_served += 1
        if fail:
            fault = "no-capacity" if faults.no_spot_capacity else "spot-capacity"
            raise EC2ClientError(
                "InsufficientInstanceCapacity", _SPOT_CAPACITY_MESSAGE.format(fault=fault)
            )
    reservation = _orig["run_instances"](self, *args, **kwargs)
    if emu is not None:
        with emu.lock:
            emu.instances_launched.extend(i.id for i in reservation.instances)
    return reservation


def _terminate(self: Instance) -> Any:
    emu = _active()
    if emu is not None:
        from .ssm_twin import stop_runs_on_instance

        # The instance's processes die with it, before its volumes go away.
        stop_runs_on_instance(emu, self.id)
    return _orig["terminate"](self)


def interrupt_spot_instance(backend: InstanceBackend, instance_id: str) -> None:
    """What a Spot interruption looks like from the API: the instance terminates by itself."""
    instance = backend.get_instance(instance_id)
    backend.terminate_instances([instance_id])
    from moto.ec2.models.instances import StateReason

    instance.state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )
    instance._reason = "Spot interruption (twin fault instance-lost)"


# --- tags -> EventBridge "Tag Change on Resource" -----------------------------------------------


def _create_tags(self: TagBackend, resource_ids: list[str], tags: dict[str, str]) -> bool:
    result = _orig["create_tags"](self, resource_ids, tags)
    emu = _active()
    if emu is not None:
        for resource_id in resource_ids:
            if resource_id.startswith("snap-"):
                emu.tag_events.append(
                    tag_change_event(
                        self,  # type: ignore[arg-type]
                        resource_id,
                        changed=list(tags),
                        all_tags=dict(self.tags[resource_id]),
                    )
                )
    return result


def tag_change_event(
    backend: Any, snapshot_id: str, changed: list[str], all_tags: dict[str, str]
) -> dict[str, Any]:
    region, account = backend.region_name, backend.account_id
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Tag Change on Resource",
        "source": "aws.tag",
        "account": account,
        "time": now,
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{account}:snapshot/{snapshot_id}"],
        "detail": {
            "changed-tag-keys": changed,
            "service": "ec2",
            "resource-type": "snapshot",
            "version": 1,
            "tags": all_tags,
        },
    }


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
    emu = _active()
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
    emu = _active()
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
    emu = _active()
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
    if _orig:
        return
    _orig["create_volume"] = EBSBackend.create_volume
    _orig["delete_volume"] = EBSBackend.delete_volume
    _orig["create_snapshot"] = EBSBackend.create_snapshot
    _orig["describe_snapshots"] = EBSBackend.describe_snapshots
    _orig["delete_snapshot"] = EBSBackend.delete_snapshot
    _orig["run_instances"] = InstanceBackend.run_instances
    _orig["terminate"] = Instance.terminate
    _orig["create_tags"] = TagBackend.create_tags
    EBSBackend.create_volume = _create_volume  # type: ignore[method-assign]
    EBSBackend.delete_volume = _delete_volume  # type: ignore[method-assign]
    EBSBackend.create_snapshot = _create_snapshot  # type: ignore[method-assign]
    EBSBackend.describe_snapshots = _describe_snapshots  # type: ignore[method-assign]
    EBSBackend.delete_snapshot = _delete_snapshot  # type: ignore[method-assign]
    Snapshot.progress = property(_progress)  # type: ignore[method-assign,assignment]
    InstanceBackend.run_instances = _run_instances  # type: ignore[method-assign]
    Instance.terminate = _terminate  # type: ignore[method-assign]
    TagBackend.create_tags = _create_tags  # type: ignore[method-assign]
    ElasticBlockStore.enable_fast_snapshot_restores = _enable_fast_snapshot_restores  # type: ignore[attr-defined]
    ElasticBlockStore.describe_fast_snapshot_restores = _describe_fast_snapshot_restores  # type: ignore[attr-defined]
    ElasticBlockStore.disable_fast_snapshot_restores = _disable_fast_snapshot_restores  # type: ignore[attr-defined]


def volume_path(emu: st.EmulatorState, volume_id: str) -> Path:
    with emu.lock:
        if volume_id not in emu.volume_files:
            raise KeyError(f"volume {volume_id} has no backing file in the twin")
        return emu.volume_files[volume_id]
