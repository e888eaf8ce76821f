"""EC2 behaviour moto lacks: volumes backed by sparse files, snapshots that take time and report
their written size, Fast Snapshot Restore, capacity faults, Spot interruption, tag-change events."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_block_store import EBSBackend, Snapshot, Volume
from moto.ec2.models.instances import Instance, InstanceBackend, StateReason
from moto.ec2.models.tags import TagBackend
from moto.ec2.responses.elastic_block_store import ElasticBlockStore

from . import boot
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


# --- volume and attachment states, as EC2 moves them ---------------------------------------
# CreateVolume answers `creating`; the volume stays so for VOLUME_CREATING_POLLS DescribeVolumes
# answers that list it, then `available`. AttachVolume answers `attaching`; the attachment stays
# `attaching` (volume `in-use`) for ATTACHING_POLLS answers, then `attached`. A ClientToken makes
# CreateVolume idempotent: a retry with the same token answers the first call's volume.

VOLUME_CREATING_POLLS = 2
ATTACHING_POLLS = 1


def _volume_status(self: Any) -> str:
    if getattr(self, "twin_creating", 0) > 0:
        return "creating"
    return "in-use" if self.attachment else "available"


def _create_volume_api(self: ElasticBlockStore) -> ActionResult:
    emu = _active()
    token = self._get_param("ClientToken")
    backend: Any = self.ec2_backend
    tokens: dict[str, str] = backend.__dict__.setdefault("twin_volume_tokens", {})
    if emu is not None and token and token in tokens and tokens[token] in backend.volumes:
        return ActionResult(backend.volumes[tokens[token]])
    result = _orig["create_volume_api"](self)
    volume: Any = result.result  # the Volume model object
    if emu is not None:
        # each DescribeVolumes answer counts one down before it is rendered
        volume.twin_creating = VOLUME_CREATING_POLLS + 1
        if token:
            tokens[token] = volume.id
    return result


def _describe_volumes(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    volumes = _orig["describe_volumes"](self, *args, **kwargs)
    if _active() is not None:
        for volume in volumes:
            _settle_volume(volume)
    return volumes


def _settle_volume(volume: Any) -> None:
    """One DescribeVolumes answer went by: move creating/attaching one step on."""
    if getattr(volume, "twin_creating", 0) > 0:
        volume.twin_creating -= 1
        return
    attachment = volume.attachment
    if attachment is not None and attachment.status == "attaching":
        left = getattr(attachment, "twin_attaching", 0)
        if left > 0:
            attachment.twin_attaching = left - 1
        else:
            attachment.status = "attached"


def _attach_volume(
    self: EBSBackend, volume_id: str, instance_id: str, device_path: str, *a: Any, **kw: Any
) -> Any:
    emu = _active()
    if emu is not None:
        volume: Any = self.get_volume(volume_id)
        instance = self.get_instance(instance_id)  # type: ignore[attr-defined]
        if volume.zone is not None and volume.zone.name != instance.placement.zone:
            raise EC2ClientError(
                "InvalidVolume.ZoneMismatch",
                f"The volume '{volume_id}' is not in the same availability zone as instance "
                f"'{instance_id}'",
            )
        if volume.status != "available":
            raise EC2ClientError(
                "IncorrectState", f"vol '{volume_id}' is not 'available'. It is '{volume.status}'."
            )
        if device_path in instance.block_device_mapping:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Invalid value '{device_path}' for unixDevice. Attachment point {device_path} "
                "is already in use",
            )
    attachment = _orig["attach_volume"](self, volume_id, instance_id, device_path, *a, **kw)
    if emu is not None and attachment is not None and getattr(self, "twin_api_attach", False):
        attachment.status = "attaching"
        attachment.twin_attaching = ATTACHING_POLLS
    return attachment


def _attach_volume_api(self: ElasticBlockStore) -> ActionResult:
    # only an AttachVolume call goes through `attaching`: RunInstances' own mappings come up
    # attached with the instance
    backend: Any = self.ec2_backend
    backend.twin_api_attach = True
    try:
        return _orig["attach_volume_api"](self)  # type: ignore[no-any-return]
    finally:
        backend.twin_api_attach = False


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
    image = _launch_image(self, args[0] if args else kwargs.get("image_id"), kwargs)
    if emu is not None and image is not None:
        _root_from_image(image, kwargs)
    reservation = _orig["run_instances"](self, *args, **kwargs)
    if emu is not None:
        with emu.lock:
            emu.instances_launched.extend(i.id for i in reservation.instances)
        for instance in reservation.instances:
            _check_launch_keys(self, instance)
            if image is not None:
                _choose_boot_disk(emu, self, instance, image)
    return reservation


def _launch_image(backend: Any, image_id: str | None, kwargs: dict[str, Any]) -> Any:
    """The AMI RunInstances launches: ImageId, else the launch template's."""
    if not image_id and kwargs.get("launch_template"):
        image_id = backend._get_template_from_args(kwargs["launch_template"]).image_id
    return backend.amis.get(image_id) if image_id else None


def _root_from_image(image: Any, kwargs: dict[str, Any]) -> None:
    """EC2 merges the AMI's mappings with the request's: a root mapping without SnapshotId (size,
    type, encryption only) still gets the AMI's root snapshot. moto leaves the volume blank."""
    mappings = kwargs.get("block_device_mappings")
    ami_mappings = getattr(image, "twin_block_device_mappings", None) or []
    ami_root = next(
        (m for m in ami_mappings if m.get("DeviceName") == image.root_device_name), None
    )
    if not mappings or ami_root is None or not ami_root.get("Ebs", {}).get("SnapshotId"):
        return
    merged = []
    for mapping in mappings:
        ebs = mapping.get("Ebs") or {}
        if mapping.get("DeviceName") == image.root_device_name and not ebs.get("SnapshotId"):
            mapping = {**mapping, "Ebs": {**ebs, "SnapshotId": ami_root["Ebs"]["SnapshotId"]}}
        merged.append(mapping)
    kwargs["block_device_mappings"] = merged


def _choose_boot_disk(emu: st.EmulatorState, backend: Any, instance: Any, image: Any) -> None:
    """The instance looks for the root filesystem UUID of its AMI's root snapshot (boot.py); a
    volume present at launch, made from a snapshot, other than its own root, that carries it is
    the disk it boots from. Volumes attached later never change this."""
    root = next(
        (m for m in (getattr(image, "twin_block_device_mappings", None) or [])
         if m.get("DeviceName") == image.root_device_name),
        None,
    )  # fmt: skip
    root_file = emu.snapshot_files.get(((root or {}).get("Ebs") or {}).get("SnapshotId", ""))
    wanted = boot.root_uuid(root_file) if root_file is not None else None
    if wanted is None:
        return
    for device_name, mapping in sorted(instance.get_block_device_mapping):
        volume = backend.volumes.get(mapping.volume_id)
        path = emu.volume_files.get(mapping.volume_id)
        if device_name == instance.root_device_name or volume is None or path is None:
            continue
        if not volume.snapshot_id:
            continue  # a blank volume has no filesystem
        for fs in boot.filesystems(path):
            if fs.uuid == wanted:
                instance.twin_boot_disk = BootDisk(mapping.volume_id, device_name, fs)
                return


@dataclass(frozen=True)
class BootDisk:
    """A volume the instance booted from instead of its own root: its root filesystem is
    mounted as the instance's / (ssm_twin mounts it while a command runs)."""

    volume_id: str
    device_name: str
    filesystem: boot.Filesystem


def boot_disk(instance: Any) -> BootDisk | None:
    return getattr(instance, "twin_boot_disk", None)


# EC2 starts the instance, cannot decrypt a volume mapped at launch, and ends it: the instance
# goes pending -> terminated with this state reason (EC2 User Guide, "Troubleshoot instance
# launch issues": "Instance terminates immediately")
KMS_INVALID_STATE = (
    "Client.InvalidKMSKey.InvalidState",
    "Client.InvalidKMSKey.InvalidState: The KMS key provided is in an incorrect state",
)
UNUSABLE_KEY_STATES = frozenset({"Disabled", "PendingDeletion", "PendingImport", "Unavailable"})


def _check_launch_keys(backend: Any, instance: Any) -> None:
    """A volume mapped at launch encrypted with a key that is disabled or pending deletion: the
    instance answers `pending` and is terminated at the next DescribeInstances."""
    from moto.kms.models import kms_backends

    kms = kms_backends[backend.account_id][backend.region_name]
    for _, mapping in instance.get_block_device_mapping:
        volume = backend.volumes.get(mapping.volume_id)
        key_id = getattr(volume, "kms_key_id", None) if volume is not None else None
        if not key_id or not getattr(volume, "encrypted", False):
            continue
        try:
            key = kms.describe_key(key_id)
        except Exception:  # a key of another account or unknown to moto: not ours to judge
            continue
        if key.key_state in UNUSABLE_KEY_STATES:
            instance._state.name, instance._state.code = "pending", 0
            instance.twin_launch_failure = KMS_INVALID_STATE
            return


def _describe_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
    _end_failed_launches(self)
    return _orig["describe_instances"](self, *args, **kwargs)


def _get_reservations_by_instance_ids(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
    _end_failed_launches(self)
    return _orig["get_reservations_by_instance_ids"](self, *args, **kwargs)


def _end_failed_launches(self: InstanceBackend) -> None:
    """DescribeInstances after a launch that cannot succeed: the instance is terminated."""
    if _active() is not None:
        for reservation in self.reservations.values():
            for instance in reservation.instances:
                failure = getattr(instance, "twin_launch_failure", None)
                if failure is None:
                    continue
                instance.twin_launch_failure = None  # type: ignore[attr-defined]
                self.terminate_instances([instance.id])
                code, message = failure
                instance.state_reason = StateReason(message, code)
                instance._reason = message


def _terminate(self: Instance) -> Any:
    emu = _active()
    if emu is not None:
        # The instance's processes die with it, before its volumes go away.
        emu.stop_runs_on(self.id)
    return _orig["terminate"](self)


def interrupt_spot_instance(backend: InstanceBackend, instance_id: str) -> None:
    """What a Spot interruption looks like from the API: the instance terminates by itself."""
    instance = backend.get_instance(instance_id)
    backend.terminate_instances([instance_id])
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
    _orig["create_volume_api"] = ElasticBlockStore.create_volume
    _orig["describe_volumes"] = EBSBackend.describe_volumes
    _orig["attach_volume"] = EBSBackend.attach_volume
    _orig["attach_volume_api"] = ElasticBlockStore.attach_volume
    _orig["describe_instances"] = InstanceBackend.describe_instances
    _orig["get_reservations_by_instance_ids"] = InstanceBackend.get_reservations_by_instance_ids
    _orig["delete_volume"] = EBSBackend.delete_volume
    _orig["create_snapshot"] = EBSBackend.create_snapshot
    _orig["describe_snapshots"] = EBSBackend.describe_snapshots
    _orig["delete_snapshot"] = EBSBackend.delete_snapshot
    _orig["run_instances"] = InstanceBackend.run_instances
    _orig["terminate"] = Instance.terminate
    _orig["create_tags"] = TagBackend.create_tags
    EBSBackend.create_volume = _create_volume  # type: ignore[method-assign]
    ElasticBlockStore.create_volume = _create_volume_api  # type: ignore[method-assign]
    EBSBackend.describe_volumes = _describe_volumes  # type: ignore[method-assign]
    EBSBackend.attach_volume = _attach_volume  # type: ignore[method-assign]
    ElasticBlockStore.attach_volume = _attach_volume_api  # type: ignore[method-assign]
    Volume.status = property(_volume_status)  # type: ignore[method-assign,assignment]
    InstanceBackend.describe_instances = _describe_instances  # type: ignore[method-assign]
    InstanceBackend.get_reservations_by_instance_ids = _get_reservations_by_instance_ids  # type: ignore[method-assign]
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
