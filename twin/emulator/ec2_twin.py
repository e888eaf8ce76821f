"""EC2 behaviour moto lacks: volumes backed by sparse files (ec2_volumes), snapshots that take
time and report their written size, Fast Snapshot Restore (ec2_snapshots), tag-change events
(ec2_tags); here: instances (capacity faults, the AMI's root snapshot, the disk an instance
boots from, unusable KMS keys, Spot interruption)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instances import Instance, InstanceBackend, StateReason

from . import boot, ec2_snapshots, ec2_tags, ec2_volumes, patching
from . import state as st

_orig: dict[str, Any] = {}


# --- instances ------------------------------------------------------------------------------

_SPOT_CAPACITY_MESSAGE = (
    "There is no Spot capacity available that matches your request. (twin fault {fault})"
)


def _run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
    emu = st.ACTIVE
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
        if device_name == instance.root_device_name or volume is None:
            continue
        if not volume.snapshot_id or mapping.volume_id not in emu.volume_files:
            continue  # a blank volume has no filesystem
        path = ec2_volumes.volume_path(emu, mapping.volume_id)
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
    if st.ACTIVE is not None:
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
    emu = st.ACTIVE
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


def install() -> None:
    ec2_volumes.install()
    ec2_snapshots.install()
    ec2_tags.install()
    patching.install(
        _orig,
        {
            "describe_instances": (InstanceBackend, "describe_instances", _describe_instances),
            "get_reservations_by_instance_ids": (
                InstanceBackend,
                "get_reservations_by_instance_ids",
                _get_reservations_by_instance_ids,
            ),
            "run_instances": (InstanceBackend, "run_instances", _run_instances),
            "terminate": (Instance, "terminate", _terminate),
        },
    )
