"""EBS volumes backed by sparse files (a volume from a snapshot starts as a copy of the snapshot's
file; encrypted, it reads pseudo-random bytes where the snapshot holds no block: encryption.py),
and the volume and attachment states EC2 moves them through."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.elastic_block_store import EBSBackend, Volume
from moto.ec2.responses.elastic_block_store import ElasticBlockStore

from devkit.chunks import copy_image
from devkit.disks.layout import create_sparse

from . import encryption, patching
from . import state as st

_orig: dict[str, Any] = {}


# --- volumes -------------------------------------------------------------------------------


def _create_volume(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    volume = _orig["create_volume"](self, *args, **kwargs)
    emu = st.ACTIVE
    if emu is not None:
        path = emu.workdir / "volumes" / f"{volume.id}.img"
        source = emu.snapshot_files.get(volume.snapshot_id or "")
        size = volume.size * st.GIB
        key = encryption.volume_kms_key(self, volume)
        origin = None
        if source is not None:
            copy_image(source, path)
            if path.stat().st_size < size:
                # A volume larger than its snapshot: the extra space is held by no snapshot.
                with open(path, "r+b") as f:
                    f.truncate(size)
            if key is not None:
                origin = encryption.FilledVolume(key)  # filled when first read (volume_path)
        else:
            create_sparse(path, size)
        with emu.lock:
            emu.volume_files[volume.id] = path
            if origin is not None:
                emu.volume_origins[volume.id] = origin
    return volume


def _delete_volume(self: EBSBackend, volume_id: str) -> Any:
    volume = _orig["delete_volume"](self, volume_id)
    emu = st.ACTIVE
    if emu is not None:
        with emu.lock:
            path = emu.volume_files.pop(volume_id, None)
            emu.volume_origins.pop(volume_id, None)
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
    fill = getattr(self, "twin_fill", None)
    if fill is not None and fill.is_alive():
        return "creating"
    return "in-use" if self.attachment else "available"


def _create_volume_api(self: ElasticBlockStore) -> ActionResult:
    emu = st.ACTIVE
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
        _start_fill(emu, volume)
    return result


def _start_fill(emu: st.EmulatorState, volume: Any) -> None:
    """An encrypted volume made from a snapshot by CreateVolume (the workflow's source volumes,
    a restore) gets its fill now, in the background, and stays `creating` until it has it: the
    time goes to the volume's creation, as EBS's does, not to the command that reads it later.
    (RunInstances' volumes stay lazy: the instance's root is never read.)"""
    with emu.lock:
        origin = emu.volume_origins.get(volume.id)
        path = emu.volume_files.get(volume.id)
    if origin is None or path is None:
        return
    volume.twin_fill = threading.Thread(
        target=encryption.fill_holes, args=(path, origin), name=f"fill-{volume.id}", daemon=True
    )
    volume.twin_fill.start()


def _describe_volumes(self: EBSBackend, *args: Any, **kwargs: Any) -> Any:
    volumes = _orig["describe_volumes"](self, *args, **kwargs)
    if st.ACTIVE is not None:
        for volume in volumes:
            _settle_volume(volume)
    return volumes


def _settle_volume(volume: Any) -> None:
    """One DescribeVolumes answer went by: move creating/attaching one step on. The answer that
    would end `creating` waits for the volume's fill instead: the fill takes real seconds that
    grow with the machine's load, while the workflow's poll bound is counted in AWS seconds (a
    few real ones here), so a busy machine would otherwise fail VolumesNotAttached."""
    if getattr(volume, "twin_creating", 0) > 0:
        volume.twin_creating -= 1
        fill = getattr(volume, "twin_fill", None)
        if volume.twin_creating == 0 and fill is not None:
            fill.join()
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
    emu = st.ACTIVE
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


def volume_path(emu: st.EmulatorState, volume_id: str) -> Path:
    """The volume's backing file, ready to be read as the volume reads (an encrypted volume from
    a snapshot gets its fill first: encryption.py). Everything that reads a volume's bytes goes
    through here."""
    with emu.lock:
        if volume_id not in emu.volume_files:
            raise KeyError(f"volume {volume_id} has no backing file in the twin")
        path = emu.volume_files[volume_id]
        origin = emu.volume_origins.get(volume_id)
    if origin is not None:
        encryption.fill_holes(path, origin)
    return path


def install() -> None:
    patching.install(
        _orig,
        {
            "create_volume": (EBSBackend, "create_volume", _create_volume),
            "create_volume_api": (ElasticBlockStore, "create_volume", _create_volume_api),
            "describe_volumes": (EBSBackend, "describe_volumes", _describe_volumes),
            "attach_volume": (EBSBackend, "attach_volume", _attach_volume),
            "attach_volume_api": (ElasticBlockStore, "attach_volume", _attach_volume_api),
            "delete_volume": (EBSBackend, "delete_volume", _delete_volume),
            "status": (Volume, "status", property(_volume_status)),
        },
    )
