"""OS=debian (issue #12): the source AMI's root volume is a real Debian bookworm disk, and after
the run the new AMI's root volume (and the source's, for comparison) boots in QEMU through its own
bootloader, with the firmware of the AMI's boot mode.

The root disk comes from devkit.debian: the debootstrap tree cached under out/cache/debian-bookworm/
(fetched from the Debian mirror once; delete the directory to refresh it), a hybrid GPT disk
(BIOS-boot partition with GRUB's core.img, FAT ESP with a standalone GRUB EFI image, ext4 root),
dirtied by package installs and purges and big writes and deletes, then copied while mounted with
writes in flight: a crash-consistent snapshot, as EBS takes of a running instance.

The boot (devkit.qemu_boot): a volume restored from the root snapshot as a launch makes it
(twin/restores.py: encrypted, where the blocks the snapshot lacks read as random bytes; and for
the new AMI of an unencrypted snapshot also unencrypted), its file opened with snapshot=on, as an
NVMe disk like a Nitro instance's EBS volume; legacy-bios boots through SeaBIOS, uefi through
OVMF. The guest's init (devkit/debian/boot-check) checks its mounts
and runs `dpkg --verify`, prints a BOOT-CHECK line and powers off; a dead end or the timeout is a
failure. Each boot takes ~25 s under TCG; they run side by side (22-25 s each for two on 2
cores)."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from devkit.debian.disk import DISK_SIZE
from devkit.debian.snapshot_cache import dirty_debian_snapshot
from devkit.disks import DiskImage
from devkit.qemu_boot import BootResult, boot

from .emulator.server import Emulator
from .options import REPO
from .restores import Restore, restored, restores_for

CACHE = REPO / "out" / "cache" / "debian-bookworm"
GIB = 1024**3
# AMI BootMode -> QEMU firmware (devkit.qemu_boot); an AMI without one boots the x86 default.
FIRMWARE = {"legacy-bios": "bios", "uefi": "uefi", "uefi-preferred": "uefi"}
FIRMWARE_NAME = {"bios": "SeaBIOS", "uefi": "OVMF"}
DEFAULT_BOOT_MODE = "legacy-bios"
INTERFACE = "nvme"  # EBS volumes are NVMe devices on Nitro instances
BOOT_TIMEOUT = 240.0  # seconds; two boots side by side took 22-25 s each here


def build_root(work: Path) -> DiskImage:
    """The Debian disk, dirtied, and its crash-consistent copy taken while mounted: the source
    AMI's root volume (`work`/root.img; the disk it was copied from is removed)."""
    if DISK_SIZE % GIB:
        raise ValueError(f"the Debian disk is {DISK_SIZE} bytes: EBS volume sizes are whole GiB")
    return dirty_debian_snapshot(work / "root.img", CACHE).image


def root_volume(emu: Emulator, image_id: str) -> dict[str, Any]:
    """The AMI's root volume snapshot (the mapping of its RootDeviceName) and its boot mode."""
    image = emu.boto3_client("ec2").describe_images(ImageIds=[image_id])["Images"][0]
    snapshot_id = next(
        m["Ebs"]["SnapshotId"]
        for m in image["BlockDeviceMappings"]
        if m["DeviceName"] == image.get("RootDeviceName") and "Ebs" in m
    )
    boot_mode = image.get("BootMode") or DEFAULT_BOOT_MODE
    return {"image_id": image_id, "snapshot_id": snapshot_id, "boot_mode": boot_mode,
            "firmware": FIRMWARE_NAME[FIRMWARE[boot_mode]], "interface": INTERFACE}  # fmt: skip


def boot_images(emu: Emulator, images: dict[str, str], logdir: Path) -> dict[str, dict[str, Any]]:
    """Boot the root volume of each AMI ({role: image id}, e.g. new and source) side by side, each
    from a volume restored from its root snapshot as a launch makes it (twin/restores.py): the
    new AMI from every restore a user can make (role `new`: encrypted; `new-unencrypted` too when
    its snapshot is unencrypted), any other AMI encrypted only. Per role: the AMI, its root
    snapshot, the restore, boot mode, firmware, whether it booted, the seconds from QEMU's start
    to the guest's power-off, the BOOT-CHECK line, the milestones, the console log
    (logdir/boot-ROLE.log) and, on failure, the console's last lines."""
    targets: dict[str, tuple[dict[str, Any], Restore]] = {}
    for role, image_id in images.items():
        target = root_volume(emu, image_id)
        ways = restores_for(emu, target["snapshot_id"])
        for way in ways if role == "new" else ways[:1]:
            name = role if way is ways[0] else f"{role}-{way.label}"
            targets[name] = (target, way)
    logdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(max_workers=len(targets)) as pool:
        made = {name: stack.enter_context(restored(emu, target["snapshot_id"], way))
                for name, (target, way) in targets.items()}  # fmt: skip
        futures = {name: _start(pool, made[name].path, target, logdir / f"boot-{name}.log")
                   for name, (target, _) in targets.items()}  # fmt: skip
        results = {name: future.result() for name, future in futures.items()}
    return {
        name: {**target, **made[name].facts(), **_facts(results[name], logdir / f"boot-{name}.log")}
        for name, (target, _) in targets.items()
    }


def _start(pool: ThreadPoolExecutor, image: Path, target: dict[str, Any],
           log: Path) -> Future[BootResult]:  # fmt: skip
    """Boot a restored root volume's file (snapshot=on: nothing is written to it)."""
    firmware = FIRMWARE[target["boot_mode"]]
    return pool.submit(boot, image, firmware, timeout=BOOT_TIMEOUT, iface=INTERFACE, log=log)


def _facts(result: BootResult, log: Path) -> dict[str, Any]:
    return {
        "boots": result.boots,
        "seconds": result.seconds,
        "marker": result.marker,
        "problems": result.problems,
        "fatal": result.fatal,
        "timed_out": result.timed_out,
        "milestones": result.milestones,
        "console_log": str(log),
        "console_tail": result.console_tail,
    }
