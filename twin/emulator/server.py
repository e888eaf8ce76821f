"""The emulator: moto's server on 127.0.0.1 with the twin's behaviour patched in.

Use it as a context manager; on exit it stops running commands, detaches the loop devices it
attached (only those) and deletes its files, also when the body failed.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import logging
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from moto.ec2.models import ec2_backends
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from devkit.chunks import copy_image

from ..iam import recorder as iam_recorder
from . import amis_twin, boot, consistency, ec2_twin, instance_metadata, map_runs, ssm_twin
from . import state as st
from .blockstore import EBS_BLOCK, fingerprint, written_chunks
from .faults import Faults
from .moto_server import TwinServer, publish_parameter, reset_moto

ACCOUNT = "123456789012"
REGION = "us-east-1"


# DescribeImages field -> the Ami attribute moto renders it from
_BILLING = {
    "Platform": "platform",
    "PlatformDetails": "platform_details",
    "UsageOperation": "usage_operation",
    "ProductCodes": "product_codes",
}


class Emulator:
    def __init__(
        self,
        workdir: Path,
        faults: Faults | None = None,
        region: str = REGION,
        diskless: bool = False,
    ):
        self.workdir = workdir
        self.region = region
        self.account = ACCOUNT
        self.state = st.EmulatorState(workdir=workdir, faults=faults or Faults(), diskless=diskless)
        self._server: ThreadedMotoServer | None = None
        self.endpoint = ""
        # The Lambdas' AWS calls with their IAM contexts (twin/iam); beside workdir, which stop()
        # deletes.
        self.calls_path = workdir.parent / f"{workdir.name}-iam-calls.jsonl"
        self._clients: dict[str, Any] = {}  # boto3_client()
        self._clients_lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Emulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        if st.ACTIVE is not None:
            raise RuntimeError("another twin emulator is active in this process; stop it first")
        # consistency wraps what the others patched in: install it last
        for module in (ec2_twin, ssm_twin, amis_twin, map_runs, consistency):
            module.install()
        reset_moto()
        # Build moto's region backend (with its stock AMIs) before the patches take effect,
        # so its placeholder volumes get no backing files.
        _ = self.ec2
        st.ACTIVE = self.state
        # One log line per API call would drown the demo's output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = TwinServer(self.account, self.region)
        self._server.start()
        self.iam_recorder = iam_recorder.install(
            self._server,
            self.calls_path,
            self.region,
            self.account,
            self.ec2,
            callers_by_key=self.state.access_keys,
            instances_by_key=self.state.instance_keys,
        )
        # outermost: an expired session token is refused before the APIs and the recorder see it
        wsgi: Any = self._server._server
        wsgi.app = instance_metadata.wrap(wsgi.app, self.state)
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.state.endpoint, self.state.region = self.endpoint, self.region
        return self.endpoint

    def stop(self) -> list[str]:
        """Tear everything down; returns why loop devices could not be detached (should be [])."""
        try:
            self.state.stop_all_runs()
        finally:
            stuck = self.state.loops.detach_all()
            if self._server is not None:
                self._server.stop()
                self._server = None
            self._clients.clear()
            if st.ACTIVE is self.state:
                st.ACTIVE = None
            reset_moto()
            shutil.rmtree(self.workdir, ignore_errors=True)
        if stuck:
            print(f"twin: could not detach loop devices {stuck}", file=sys.stderr)
        return stuck

    # --- access -----------------------------------------------------------------------------

    @property
    def ec2(self) -> Any:
        return ec2_backends[self.account][self.region]

    def client_env(self) -> dict[str, str]:
        """Environment for a process that talks to this emulator with boto3."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    def function_credentials(self, function_name: str) -> dict[str, str]:
        """The environment credentials of one Lambda function: an access key of its own (as each
        execution role's session has), so that a URL it presigns names it (X-Amz-Credential) and
        the IAM check judges the URL's use by that function's role."""
        digest = hashlib.sha256(function_name.encode()).digest()
        key = "ASIATWIN" + base64.b32encode(digest).decode()[:12]
        with self.state.lock:
            self.state.access_keys[key] = function_name
        return {
            "AWS_ACCESS_KEY_ID": key,
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
        }

    def boto3_client(self, service: str) -> Any:
        """A client of this emulator with the twin's own credentials (set-up and inspection, not
        a Lambda's calls). One per service while the emulator runs: making a client costs
        20-30 ms of CPU, and a run's set-up and checks asked for one at each call site. It is
        shared: a caller that registers event handlers makes a client of its own."""
        import boto3

        with self._clients_lock:
            client = self._clients.get(service)
            if client is None:
                client = self._clients[service] = boto3.client(  # type: ignore[call-overload]
                    service,
                    endpoint_url=self.endpoint,
                    region_name=self.region,
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )
            return client

    # --- registry: disk images as snapshots and AMIs ------------------------------------------

    def register_snapshot(
        self,
        image: Path,
        description: str = "",
        tags: dict[str, str] | None = None,
        state: str = "completed",
        encrypted: bool = False,
        completes: bool = False,
        *,
        state_message: str | None = None,
        storage_tier: str = "standard",
        restore_expiry: datetime.datetime | None = None,
        kms_key_id: str | None = None,
    ) -> str:
        """Register a disk image as a snapshot (the image's allocated blocks = its written blocks).
        The image is copied; the caller keeps the original. A `pending` snapshot with completes=True
        completes after a few DescribeSnapshots, like one the workflow creates."""
        size = image.stat().st_size
        if size % st.GIB:
            raise ValueError(
                f"{image} is {size} bytes; an EBS snapshot's volume size is whole GiB: "
                "build the image with a size that is a multiple of 1 GiB"
            )
        ec2 = self.ec2
        # The volume the snapshot was taken from; created outside the twin's bookkeeping.
        st.ACTIVE = None
        try:
            volume = ec2.create_volume(
                size=size // st.GIB, zone_name=f"{self.region}a", encrypted=encrypted
            )
            snapshot = ec2.create_snapshot(volume.id, description)
            ec2.delete_volume(volume.id)
        finally:
            st.ACTIVE = self.state
        path = self.workdir / "snapshots" / f"{snapshot.id}.img"
        copy_image(image, path)
        snapshot.status = state
        snapshot.twin_progress = "100%" if state == "completed" else "42%"
        snapshot.full_snapshot_size_in_bytes = len(written_chunks(path)) * EBS_BLOCK
        # what DescribeSnapshots renders (moto 5.2.5 serializes these attributes as they are):
        # StateMessage of a snapshot in error, StorageTier archive (RestoreExpiryTime of a
        # temporary restore), KmsKeyId (e.g. another account's key ARN)
        if state_message is not None:
            snapshot.state_message = state_message
        snapshot.storage_tier = storage_tier
        snapshot.restore_expiry_time = restore_expiry
        if kms_key_id is not None:
            snapshot.encrypted = True
            snapshot.kms_key_id = kms_key_id
        if tags:
            snapshot.add_tags(tags)
        with self.state.lock:
            self.state.snapshot_files[snapshot.id] = path
            if state == "pending" and completes:
                self.state.snapshot_polls[snapshot.id] = 0
        self.state.tag_events.clear()  # registration is set-up, not a user's tag change
        return str(snapshot.id)

    def register_ami(
        self,
        name: str,
        volumes: list[tuple[str, Path]],
        attributes: dict[str, Any],
        kms_key_id: str | None = None,
    ) -> tuple[str, list[str]]:
        """Register an AMI whose EBS volumes are the given images (device name, image), their
        snapshots encrypted with kms_key_id when given.
        attributes may also hold the billing fields DescribeImages renders (Platform,
        PlatformDetails, UsageOperation, ProductCodes: a list of product code ids)."""
        attributes = dict(attributes)
        billing = {key: attributes.pop(key) for key in _BILLING if key in attributes}
        snapshot_ids = [
            self.register_snapshot(img, f"{name} {dev}", kms_key_id=kms_key_id)
            for dev, img in volumes
        ]
        mappings = [
            {
                "DeviceName": dev,
                "Ebs": {
                    "SnapshotId": sid,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            }
            for (dev, _), sid in zip(volumes, snapshot_ids, strict=True)
        ]
        image = amis_twin.register_full_image(
            self.ec2, {"Name": name, **attributes, "BlockDeviceMappings": mappings}
        )
        for key, value in billing.items():
            if key == "ProductCodes":
                # moto keeps ids in a set, which DescribeImages renders as []: give it the shape
                value = [
                    {"ProductCodeId": code, "ProductCodeType": "marketplace"} for code in value
                ]
            setattr(image, _BILLING[key], value)
        return str(image.id), snapshot_ids

    def transfer_image(self) -> str:
        """The twin's Amazon Linux 2023 ("AL2023 base", boot.py): an Amazon-owned AMI whose root
        snapshot holds a small ext4 root of boot.AL2023_ROOT_UUID, answered by the public SSM
        parameter the launch template resolves. Built once per emulator, on first use."""
        if self.state.transfer_image_id is not None:
            return self.state.transfer_image_id
        disk = boot.build_base_root(self.workdir / "al2023-base-root.img")
        try:
            image_id, (snapshot_id,) = self.register_ami(
                boot.TRANSFER_AMI_NAME,
                [(boot.ROOT_DEVICE_NAME, disk)],
                {
                    "Description": "Amazon Linux 2023 AMI (twin: the AL2023 base)",
                    "Architecture": "x86_64",
                    "RootDeviceName": boot.ROOT_DEVICE_NAME,
                    "VirtualizationType": "hvm",
                    "BootMode": "uefi-preferred",
                    "EnaSupport": True,
                    "ImdsSupport": "v2.0",
                },
            )
        finally:
            disk.unlink(missing_ok=True)
        image = self.ec2.amis[image_id]
        image.owner_id, image.owner_alias = boot.AMAZON_ACCOUNT, "amazon"
        self.ec2.snapshots[snapshot_id].owner_id = boot.AMAZON_ACCOUNT
        with self.state.lock:
            # set-up, not something the workflow registered
            if image_id in self.state.images_created:
                self.state.images_created.remove(image_id)
            self.state.transfer_image_id = image_id
        publish_parameter(self.account, self.region, boot.TRANSFER_AMI_PARAMETER, image_id)
        return image_id

    def snapshot_file(self, snapshot_id: str) -> Path:
        return self.state.snapshot_files[snapshot_id]

    def snapshot_fingerprint(self, snapshot_id: str) -> str | None:
        path = self.state.snapshot_files.get(snapshot_id)
        return fingerprint(path) if path is not None and path.exists() else None

    def snapshot_chunks(self, snapshot_id: str) -> int:
        return len(written_chunks(self.state.snapshot_files[snapshot_id]))
