"""OS=debian (issue #12): the source AMI's root volume is a real Debian bookworm disk, and after
the run the new AMI's root volume (and the source's, for comparison) boots in QEMU through its own
bootloader, with the firmware of the AMI's boot mode.

The root disk comes from devkit.debian: the debootstrap tree cached under out/cache/debian-bookworm/
(fetched from the Debian mirror once; delete the directory to refresh it), a hybrid GPT disk
(BIOS-boot partition with GRUB's core.img, FAT ESP with a standalone GRUB EFI image, ext4 root),
dirtied by package installs and purges and big writes and deletes, then copied while mounted with
writes in flight: a crash-consistent snapshot, as EBS takes of a running instance.

The boot (devkit.qemu_boot): the root snapshot's backing sparse file, opened with snapshot=on
(nothing is written to it), as an NVMe disk like a Nitro instance's EBS volume; legacy-bios boots
through SeaBIOS, uefi through OVMF. The guest's init (devkit/debian/boot-check) checks its mounts
and runs `dpkg --verify`, prints a BOOT-CHECK line and powers off; a dead end or the timeout is a
failure. Each boot takes ~25 s under TCG; the two run side by side (22-25 s each on 2 cores)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from devkit.debian.cache import churn_debs, rootfs_tarball
from devkit.debian.dirt import dirty_snapshot
from devkit.debian.disk import DISK_SIZE, build_disk
from devkit.disks import DiskImage
from devkit.qemu_boot import BootResult, boot

from .emulator.server import Emulator
from .options import REPO

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
    disk = build_disk(work / "debian-disk.img", rootfs_tarball(CACHE))
    snapshot = work / "root.img"
    dirty_snapshot(disk, churn_debs(CACHE), snapshot)
    disk.image.path.unlink()
    return disk.image.copy_at(snapshot)


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
    """Boot the root volume of each AMI ({role: image id}, e.g. new and source) side by side;
    per role: the AMI, its root snapshot, boot mode, firmware, whether it booted, the seconds
    from QEMU's start to the guest's power-off, the BOOT-CHECK line, the milestones, the console
    log (logdir/boot-ROLE.log) and, on failure, the console's last lines."""
    targets = {role: root_volume(emu, image_id) for role, image_id in images.items()}
    logdir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        futures = {role: _start(pool, emu, target, logdir / f"boot-{role}.log")
                   for role, target in targets.items()}  # fmt: skip
        results = {role: future.result() for role, future in futures.items()}
    return {
        role: {**targets[role], **_facts(results[role], logdir / f"boot-{role}.log")}
        for role in targets
    }


def _start(pool: ThreadPoolExecutor, emu: Emulator, target: dict[str, Any],
           log: Path) -> Future[BootResult]:  # fmt: skip
    """Boot the target's root snapshot file (snapshot=on: nothing is written to it)."""
    image = emu.snapshot_file(target["snapshot_id"])
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
