"""EC2's eventual consistency where it hurts, on by default (not a fault):

- a freshly created instance, volume, snapshot or AMI is missing from TAG-FILTERED Describe*
  answers (DescribeInstances/DescribeVolumes/DescribeSnapshots/DescribeImages with a `tag:`,
  `tag-key` or `tag-value` filter) for the first TAG_LAG_CALLS answers that would have listed it;
  described by id it is there at once (EC2's documented eventual consistency: "resources that you
  create might not be immediately visible to subsequent Describe calls that use filters");
- DeleteSnapshot of a snapshot that a registered AMI uses answers InvalidSnapshot.InUse while the
  AMI exists and for DEREGISTER_SETTLE_CALLS DeleteSnapshot calls after DeregisterImage.

Patched onto moto's backends after ec2_twin/amis_twin (it wraps whatever is installed), active
only while an emulator is (state.ACTIVE).
"""

from __future__ import annotations

from typing import Any

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.amis import AmiBackend
from moto.ec2.models.elastic_block_store import EBSBackend
from moto.ec2.models.instances import InstanceBackend

from . import patching
from . import state as st

TAG_LAG_CALLS = 2
DEREGISTER_SETTLE_CALLS = 2

_orig: dict[str, Any] = {}


def _tag_filtered(filters: Any) -> bool:
    if not filters:
        return False
    names = filters.keys() if isinstance(filters, dict) else [f.get("Name", "") for f in filters]
    return any(n.startswith("tag:") or n in ("tag-key", "tag-value") for n in names)


def _fresh(emu: st.EmulatorState, resource_id: str) -> None:
    with emu.lock:
        emu.tag_lag[resource_id] = TAG_LAG_CALLS


def mark_fresh(emu: st.EmulatorState, resource_id: str) -> None:
    """A resource created outside moto's create_* calls (an EBS direct snapshot) lags too."""
    _fresh(emu, resource_id)


def _hidden(emu: st.EmulatorState, resource_id: str) -> bool:
    """Whether this answer leaves the resource out (and count the answer)."""
    with emu.lock:
        left = emu.tag_lag.get(resource_id, 0)
        if left <= 0:
            return False
        emu.tag_lag[resource_id] = left - 1
        emu.tag_lag_hidden += 1
        return True


# --- creation marks --------------------------------------------------------------------------


def _create_volume(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    volume = _orig["create_volume"](self, *args, **kwargs)
    emu = st.ACTIVE
    if emu is not None:
        _fresh(emu, volume.id)
    return volume


def _create_snapshot(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    snapshot = _orig["create_snapshot"](self, *args, **kwargs)
    emu = st.ACTIVE
    if emu is not None and not kwargs.get("from_ami"):
        _fresh(emu, snapshot.id)
        with emu.lock:
            emu.snapshots_created.append(snapshot.id)
    return snapshot


def _run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
    reservation = _orig["run_instances"](self, *args, **kwargs)
    emu = st.ACTIVE
    if emu is not None:
        for instance in reservation.instances:
            _fresh(emu, instance.id)
    return reservation


def _register_image(self: AmiBackend, *args: Any, **kwargs: Any) -> Any:
    image = _orig["register_image"](self, *args, **kwargs)
    emu = st.ACTIVE
    if emu is not None:
        _fresh(emu, image.id)
        with emu.lock:
            emu.images_created.append(image.id)
    return image


# --- tag-filtered answers ----------------------------------------------------------------------


def _describe_instances(self: InstanceBackend, filters: Any = None) -> Any:
    reservations = _orig["describe_instances"](self, filters)
    emu = st.ACTIVE
    if emu is None or not _tag_filtered(filters):
        return reservations
    out = []
    for reservation in reservations:
        # moto hands out shallow copies of its reservations: replacing the list is safe.
        reservation.instances = [i for i in reservation.instances if not _hidden(emu, i.id)]
        if reservation.instances:
            out.append(reservation)
    return out


def _describe_volumes(self: EBSBackend, volume_ids: Any = None, filters: Any = None) -> Any:
    volumes = _orig["describe_volumes"](self, volume_ids, filters)
    emu = st.ACTIVE
    if emu is None or volume_ids or not _tag_filtered(filters):
        return volumes
    return [v for v in volumes if not _hidden(emu, v.id)]


def _describe_snapshots(self: EBSBackend, snapshot_ids: Any = None, filters: Any = None) -> Any:
    snapshots = _orig["describe_snapshots"](self, snapshot_ids, filters)
    emu = st.ACTIVE
    if emu is None or snapshot_ids or not _tag_filtered(filters):
        return snapshots
    return [s for s in snapshots if not _hidden(emu, s.id)]


def _describe_images(
    self: AmiBackend, ami_ids: Any = None, filters: Any = None, *a: Any, **kw: Any
) -> Any:
    images = _orig["describe_images"](self, ami_ids, filters, *a, **kw)
    emu = st.ACTIVE
    if emu is None or ami_ids or not _tag_filtered(filters):
        return images
    return [i for i in images if not _hidden(emu, i.id)]


# --- an AMI's snapshots ------------------------------------------------------------------------


def _image_snapshots(image: Any) -> set[str]:
    mappings = getattr(image, "twin_block_device_mappings", None) or []
    return {
        str(m["Ebs"]["SnapshotId"])
        for m in mappings
        if isinstance(m, dict) and (m.get("Ebs") or {}).get("SnapshotId")
    }


def _deregister_image(self: AmiBackend, ami_id: str) -> Any:
    image = self.amis.get(ami_id)
    result = _orig["deregister_image"](self, ami_id)
    emu = st.ACTIVE
    if emu is not None and image is not None:
        with emu.lock:
            for snapshot_id in _image_snapshots(image):
                emu.deregister_settling[snapshot_id] = DEREGISTER_SETTLE_CALLS
    return result


def _delete_snapshot(self: EBSBackend, snapshot_id: str) -> Any:
    emu = st.ACTIVE
    if emu is not None and snapshot_id in self.snapshots:
        users = [i.id for i in list(self.amis.values()) if snapshot_id in _image_snapshots(i)]  # type: ignore[attr-defined]
        with emu.lock:
            settling = emu.deregister_settling.get(snapshot_id, 0)
            if not users and settling > 0:
                emu.deregister_settling[snapshot_id] = settling - 1
        if users or settling > 0:
            with emu.lock:
                emu.snapshot_in_use_served += 1
            user = users[0] if users else "an image being deregistered"
            raise EC2ClientError(
                "InvalidSnapshot.InUse",
                f"The snapshot {snapshot_id} is currently in use by {user}",
            )
    return _orig["delete_snapshot"](self, snapshot_id)


def install() -> None:
    patching.install(
        _orig,
        {
            "create_volume": (EBSBackend, "create_volume", _create_volume),
            "create_snapshot": (EBSBackend, "create_snapshot", _create_snapshot),
            "run_instances": (InstanceBackend, "run_instances", _run_instances),
            "register_image": (AmiBackend, "register_image", _register_image),
            "describe_instances": (InstanceBackend, "describe_instances", _describe_instances),
            "describe_volumes": (EBSBackend, "describe_volumes", _describe_volumes),
            "describe_snapshots": (EBSBackend, "describe_snapshots", _describe_snapshots),
            "describe_images": (AmiBackend, "describe_images", _describe_images),
            "deregister_image": (AmiBackend, "deregister_image", _deregister_image),
            "delete_snapshot": (EBSBackend, "delete_snapshot", _delete_snapshot),
        },
    )
