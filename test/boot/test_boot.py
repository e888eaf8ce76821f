"""Issue #12: the boot proof can fail. The proof itself, that sparsecopy's copy of a real Debian
disk boots through its own bootloader with SeaBIOS and with OVMF, is test/twin/test_debian_boot.py:
the workflow compacts the disk's encrypted snapshot into a new AMI and QEMU (TCG) boots its root
with the AMI's boot mode, the guest's boot-check init reporting every mount and `dpkg --verify`
clean. (A plain CLI copy booted here too until it was seen to prove nothing more: the same
program, disk and firmware, without the encrypted restore.)

Here, the same dirtied Debian disk (debootstrap, cached under out/cache/) with a partition
punched out must not boot: without its BIOS-boot partition it does not boot BIOS (no GRUB),
without its ESP it does not boot UEFI. Needs root and the mirror once (~70 s), then ~1 min.
Run by `make test-boot`."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.commands import run
from devkit.debian.disk import BIOS_PART, ESP_PART, DebianDisk
from devkit.debian.snapshot_cache import dirty_debian_snapshot
from devkit.needs import BOOT_TOOLS
from devkit.pytest_ci import needs_tools
from devkit.qemu_boot import BootResult, boot

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "out" / "test-boot"
pytestmark = [pytest.mark.needs_root, needs_tools(*BOOT_TOOLS)]


@pytest.fixture(scope="module")
def snapshot() -> tuple[DebianDisk, Path]:
    """The dirtied disk and its crash-consistent copy taken while mounted."""
    WORK.mkdir(parents=True, exist_ok=True)
    snap = WORK / "snapshot.img"
    disk = dirty_debian_snapshot(snap, REPO / "out/cache/debian-bookworm")
    return disk, snap


def with_hole(image: Path, disk: DebianDisk, number: int, name: str) -> Path:
    """A copy of `image` whose partition `number` was never written (a hole)."""
    holed = WORK / name
    run("cp", "--sparse=always", str(image), str(holed))
    part = disk.image.partition(number)
    run("fallocate", "--punch-hole", "--offset", str(part.start), "--length", str(part.size),
        str(holed))  # fmt: skip
    return holed


def report(result: BootResult) -> None:
    print(
        f"\n{result.firmware} boot of {Path(result.image).name}: boots={result.boots} "
        f"{result.seconds} s marker={result.marker!r} fatal={result.fatal!r}"
    )
    if not result.boots:
        print("\n".join(result.console_tail))


def test_a_disk_without_bios_boot_partition_fails_bios(snapshot: tuple[DebianDisk, Path]) -> None:
    holed = with_hole(snapshot[1], snapshot[0], BIOS_PART, "no-bios-boot.img")
    result = boot(holed, "bios", log=WORK / "console-no-bios-boot.log")
    report(result)
    assert not result.boots
    assert result.fatal == "no GRUB"


def test_a_disk_without_esp_fails_uefi(snapshot: tuple[DebianDisk, Path]) -> None:
    holed = with_hole(snapshot[1], snapshot[0], ESP_PART, "no-esp.img")
    result = boot(holed, "uefi", log=WORK / "console-no-esp.log")
    report(result)
    assert not result.boots
    assert result.fatal is not None
