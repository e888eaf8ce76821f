"""Issue #12: the compacted copy of a real Debian disk boots through its own bootloader.

A Debian bookworm disk (debootstrap, cached under out/cache/) with GRUB for BIOS and UEFI is
dirtied and copied while mounted (a crash-consistent snapshot); sparsecopy copies that snapshot
between loop devices; QEMU (TCG) boots the copy with SeaBIOS and with OVMF, and the guest's
boot-check init must report every mount and `dpkg --verify` clean. Negatives: without its
BIOS-boot partition the copy does not boot BIOS, without its ESP it does not boot UEFI.
Needs root, the mirror once (~70 s), then ~2 min (four boots under TCG). Run by `make test-boot`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.chunks import written_chunks
from devkit.commands import run
from devkit.debian.disk import BIOS_PART, ESP_PART, DebianDisk
from devkit.debian.snapshot_cache import dirty_debian_snapshot
from devkit.loop import LoopDevices
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


@pytest.fixture(scope="module")
def copy(snapshot: tuple[DebianDisk, Path]) -> Iterator[Path]:
    """The snapshot copied by sparsecopy, from a volume restored from it (a writable throwaway
    copy: sparsecopy replays the ext4 journal on its source) to an empty volume."""
    _, snap = snapshot
    source, target = WORK / "source.img", WORK / "copy.img"
    run("cp", "--sparse=always", str(snap), str(source))
    target.unlink(missing_ok=True)
    with target.open("wb") as f:
        f.truncate(snap.stat().st_size)
    loops = LoopDevices("test/boot")
    scratch = WORK / "scratch"
    scratch.mkdir(exist_ok=True)
    try:
        src, dst = loops.attach(source), loops.attach(target)
        env = {**os.environ, "PYTHONPATH": str(REPO / "ssm-documents")}
        subprocess.run(
            [sys.executable, "-m", "sparsecopy", "copy", src, dst, "--verify", "--scratch",
             str(scratch)],
            check=True, env=env,
        )  # fmt: skip
    finally:
        assert not loops.detach_all()
    before, after = len(written_chunks(snap)), len(written_chunks(target))
    print(f"\nstored 512 KiB chunks: snapshot {before} -> sparsecopy copy {after}")
    assert after < before
    yield target


def with_hole(copy: Path, disk: DebianDisk, number: int, name: str) -> Path:
    """A copy of `copy` whose partition `number` was never written (a hole)."""
    holed = WORK / name
    run("cp", "--sparse=always", str(copy), str(holed))
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


@pytest.mark.parametrize("firmware", ["bios", "uefi"])
def test_copy_boots(copy: Path, firmware: str) -> None:
    result = boot(copy, firmware, log=WORK / f"console-copy-{firmware}.log")
    report(result)
    assert result.boots
    assert result.marker is not None and f"firmware={firmware}" in result.marker
    assert result.problems == 0


def test_copy_without_bios_boot_partition_fails_bios(
    copy: Path, snapshot: tuple[DebianDisk, Path]
) -> None:
    holed = with_hole(copy, snapshot[0], BIOS_PART, "copy-no-bios-boot.img")
    result = boot(holed, "bios", log=WORK / "console-no-bios-boot.log")
    report(result)
    assert not result.boots
    assert result.fatal == "no GRUB"


def test_copy_without_esp_fails_uefi(copy: Path, snapshot: tuple[DebianDisk, Path]) -> None:
    holed = with_hole(copy, snapshot[0], ESP_PART, "copy-no-esp.img")
    result = boot(holed, "uefi", log=WORK / "console-no-esp.log")
    report(result)
    assert not result.boots
    assert result.fatal is not None
