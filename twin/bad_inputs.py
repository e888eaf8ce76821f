"""Inputs prepare must refuse before anything is created, as fixtures in the emulator.

cases(emu, source_disk_path) registers what each case needs (an archived snapshot, a snapshot in
state error, paid AMIs) and returns (case name, execution input, expected error name) rows; the
demo's bad-input scenario and test/twin/test_refusals.py run them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from .emulator.server import Emulator

# a Windows AMI bills as RunInstances:0002 (EC2 "AMI billing information"); RHEL is :0010
_LINUX_AMI = {"Architecture": "x86_64", "RootDeviceName": "/dev/xvda", "BootMode": "uefi"}


def cases(emu: Emulator, source_disk_path: Path) -> list[tuple[str, dict[str, Any], str]]:
    archived = emu.register_snapshot(
        source_disk_path,
        "archived source",
        storage_tier="archive",
        restore_expiry=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )
    failed = emu.register_snapshot(
        source_disk_path,
        "failed source",
        state="error",
        state_message="twin: the snapshot could not be completed",
    )
    windows, _ = emu.register_ami(
        "windows-server-2022",
        [("/dev/sda1", source_disk_path)],
        {
            **_LINUX_AMI,
            "RootDeviceName": "/dev/sda1",
            "Platform": "windows",
            "PlatformDetails": "Windows",
            "UsageOperation": "RunInstances:0002",
        },
    )
    marketplace, _ = emu.register_ami(
        "marketplace-appliance",
        [("/dev/xvda", source_disk_path)],
        {**_LINUX_AMI, "ProductCodes": ["cynhm1j9d2839l7ehzmnes1u3"]},
    )
    return [
        ("unknown snapshot", {"snapshotId": "snap-0123456789abcdef0"}, "SnapshotNotFound"),
        ("malformed input", {"snapshotId": "vol-0123456789abcdef0"}, "InvalidInput"),
        ("archived snapshot", {"snapshotId": archived}, "SnapshotArchived"),
        ("paid AMI (Windows, RunInstances:0002)", {"imageId": windows}, "UnsupportedImage"),
        ("AMI with product codes", {"imageId": marketplace}, "UnsupportedImage"),
        ("snapshot in state error", {"snapshotId": failed}, "SnapshotNotCompleted"),
    ]
