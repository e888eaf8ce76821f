"""Loop devices: a file (a slice of it, or another loop device) seen as a block device.

Other users attach loop devices on the same machine at the same time, so nothing here detaches
a device it did not attach itself (never `losetup -D`), and a detach is never retried blindly:
once freed, the same name may already be another user's new device. This kernel does not scan
partition tables, so a partition is an offset loop device (`losetup -o OFFSET --sizelimit SIZE`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from devkit.commands import run
from devkit.mounts import mountpoints_of


class LoopError(RuntimeError):
    """A loop device could not be attached or detached."""


def attach(
    backing: str | os.PathLike[str],
    offset: int = 0,
    size: int | None = None,
    *,
    read_only: bool = False,
    direct_io: bool = False,
    sector_size: int = 512,
) -> str:
    """Attach `backing` (from `offset`, `size` bytes) to a free loop device; return its name.

    `direct_io`: the device reads and writes its backing with O_DIRECT, so a device stacked on
    another passes each request straight through (no second page cache, no second read-ahead).
    `sector_size=4096` makes a disk with 4 KiB logical sectors."""
    args = ["losetup", "--find", "--show", "--offset", str(offset)]
    if size is not None:
        args += ["--sizelimit", str(size)]
    if sector_size != 512:
        args += ["--sector-size", str(sector_size)]
    if read_only:
        args.append("--read-only")
    if direct_io:
        args.append("--direct-io=on")
    device = run(*args, str(backing)).strip()
    if not device.startswith("/dev/loop"):
        raise LoopError(f"losetup printed {device!r} instead of a loop device for {backing}")
    absorb_stale_write_error(device)
    return device


def serves(device: str, backing: str | os.PathLike[str], offset: int = 0) -> bool:
    """Whether `device` is (still) the loop device over `backing` at `offset` (a backing file
    deleted meanwhile still counts: the device holds it, and it must still be detached)."""
    sysdir = Path("/sys/block") / Path(device).name / "loop"
    try:
        attached = (sysdir / "backing_file").read_text().strip().removesuffix(" (deleted)")
        at = int((sysdir / "offset").read_text().strip())
    except (OSError, ValueError):
        return False
    return attached == os.path.realpath(backing) and at == offset


def detach(device: str, backing: str | os.PathLike[str], offset: int = 0) -> None:
    """Detach our device and wait until it no longer serves `backing`: a device still open
    elsewhere (udev, a FUSE daemon that outlives umount) is only marked for auto-clear.

    Once a detach succeeded it is never repeated: the kernel frees the device when its last
    user closes it, and another process may attach the same name at once (a repeated detach
    took a parallel test's new device from under it)."""
    marked = False
    for attempt in range(20):
        if not serves(device, backing, offset):
            return
        if not marked:
            result = subprocess.run(["losetup", "--detach", device], capture_output=True)
            marked = result.returncode == 0
        time.sleep(0.1 * (attempt + 1))
    raise LoopError(f"{device} still serves {backing}: detach it with losetup -d {device}")


def mark_for_detach(device: str) -> None:
    """One `losetup --detach` without waiting: the kernel frees the device once its last user
    closes it. A device that is already gone is not an error."""
    result = subprocess.run(["losetup", "--detach", device], capture_output=True, text=True)
    if result.returncode != 0 and "No such device" not in result.stderr:
        raise LoopError(f"losetup --detach {device} failed: {result.stderr.strip()}")


@contextlib.contextmanager
def loop_device(
    path: str | os.PathLike[str],
    offset: int = 0,
    size: int | None = None,
    read_only: bool = False,
    sector_size: int = 512,
) -> Iterator[str]:
    """`path` (from `offset`, `size` bytes) as a loop device for the `with` block; always
    detached after."""
    device = attach(path, offset, size, read_only=read_only, sector_size=sector_size)
    try:
        yield device
    finally:
        detach(device, path, offset)


def absorb_stale_write_error(device: str) -> None:
    """Consume a write error left unreported on this loop device number by an earlier user.

    A block device's page cache outlives detaching: a write error someone else's I/O left on
    /dev/loopN and that nobody fsync'ed is reported to the next file that opens loopN (a new
    opener samples the error as unseen), e.g. to a loop device stacked on it, whose flushes then
    fail with EIO. One fsync right after attaching marks it seen; what it returns is not ours.
    """
    try:
        fd = os.open(device, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def kernel_loops() -> dict[str, str]:
    """Every loop device the kernel has, with its backing file (a path, possibly a device)."""
    loops = {}
    for entry in Path("/sys/block").glob("loop*"):
        try:
            text = (entry / "loop" / "backing_file").read_text()
        except OSError:  # not bound, or detached meanwhile by someone else (ENOENT, ENODEV)
            continue
        loops[f"/dev/{entry.name}"] = text.strip().removesuffix(" (deleted)")
    return loops


def loops_backed_by(devices: Iterable[str]) -> list[str]:
    """Loop devices over `devices`, transitively, in the order they stack (innermost first)."""
    found: list[str] = []
    frontier = set(devices)
    loops = kernel_loops()
    while frontier:
        layer = [dev for dev, backing in loops.items() if backing in frontier and dev not in found]
        found += sorted(layer)
        frontier = set(layer)
    return found


class LoopDevices:
    """The loop devices one owner (a bench run, an emulator) attached; it detaches only those.

    `wait_until_free`: a detach waits until the device no longer serves its file (the bench);
    otherwise it only marks the device for auto-clear (the twin, whose instances may still hold
    a device open for a moment). `error`: the exception type the owner reports failures with.
    Thread-safe."""

    def __init__(
        self,
        owner: str = "this process",
        *,
        wait_until_free: bool = True,
        error: type[Exception] = LoopError,
    ) -> None:
        self.owner = owner
        self.wait_until_free = wait_until_free
        self.error = error
        self.attached: dict[str, Path] = {}  # device -> backing file
        self._offsets: dict[str, int] = {}
        self._lock = threading.Lock()

    def attach(
        self,
        backing: Path,
        offset: int = 0,
        size: int | None = None,
        *,
        read_only: bool = False,
        direct_io: bool = False,
    ) -> str:
        """A loop device over `backing` (a file, or one of our devices: from `offset`, `size`
        bytes, like a partition of it)."""
        try:
            device = attach(backing, offset, size, read_only=read_only, direct_io=direct_io)
        except RuntimeError as err:
            raise self.error(str(err)) from err
        with self._lock:
            self.attached[device] = backing
            self._offsets[device] = offset
        return device

    def detach(self, device: str) -> None:
        with self._lock:
            if device not in self.attached:
                raise self.error(f"refusing to detach {device}: {self.owner} did not attach it")
            backing = self.attached.pop(device)
            offset = self._offsets.pop(device)
        try:
            if self.wait_until_free:
                detach(device, backing, offset)
            else:
                mark_for_detach(device)
        except LoopError as err:
            with self._lock:  # still ours: detach_all tries again
                self.attached[device] = backing
                self._offsets[device] = offset
            raise self.error(str(err)) from err

    def detach_all(self) -> list[str]:
        """Detach everything still attached, the last attached first; returns one message per
        device that would not go."""
        problems = []
        for device in reversed(list(self.attached)):
            try:
                self.detach(device)
            except self.error as err:
                problems.append(str(err))
        return problems

    def release_stacked(self, devices: list[str]) -> list[str]:
        """Unmount and detach what a program built on top of `devices` and left behind.

        On EC2 a lost instance takes its kernel with it; here the "instance" shares this
        machine's kernel, so the loop devices and mounts its programs made over its volumes
        would outlive it. Returns the stacked devices released."""
        released: list[str] = []
        for device in reversed(loops_backed_by(devices)):  # the outermost first
            for mountpoint in mountpoints_of(device):
                subprocess.run(["umount", "-l", mountpoint], capture_output=True)
            subprocess.run(["losetup", "--detach", device], capture_output=True)
            released.append(device)
        return released

    def kernel_leftovers(self, workdir: Path) -> list[str]:
        """Loop devices the kernel still has over files under `workdir` (deleted ones included)
        or over devices made from them."""
        roots = {
            dev for dev, backing in kernel_loops().items() if Path(backing).is_relative_to(workdir)
        }
        return sorted(roots | set(loops_backed_by(roots)))
