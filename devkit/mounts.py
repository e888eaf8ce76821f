"""Mounting a device on a directory and getting it back: ext4, XFS and btrfs through the kernel,
NTFS through ntfs-3g (FUSE), whose daemon still holds the device for a moment after umount."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from devkit.commands import run


class MountError(RuntimeError):
    """A filesystem could not be unmounted, or its FUSE daemon would not exit."""


def mount(device: str, target: Path, fstype: str | None = None, options: str = "") -> None:
    """Mount `device` on `target` (`fstype="ntfs"`: through ntfs-3g)."""
    if fstype == "ntfs":
        fstype = "ntfs-3g"
    run(
        "mount",
        *(["-t", fstype] if fstype else []),
        *(["-o", options] if options else []),
        device,
        str(target),
    )


def unmount(target: Path, attempts: int = 20) -> None:
    """Unmount `target`, retrying while it is busy for a moment (udev, a FUSE daemon); then wait
    until the ntfs-3g daemon that served it has closed the device, so that detaching the loop
    device right after really detaches it."""
    daemons = fuse_daemons(target)
    for attempt in range(attempts):
        proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
        if proc.returncode == 0:
            break
        if attempt == attempts - 1:
            raise MountError(f"could not unmount {target}: {proc.stderr.strip()}")
        time.sleep(0.1 * (attempt + 1))
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in daemons):
        if time.monotonic() > deadline:
            raise MountError(f"ntfs-3g for {target} did not exit within 10 s of umount")
        time.sleep(0.05)


@contextlib.contextmanager
def mounted(device: str, fstype: str | None = None, options: str = "") -> Iterator[Path]:
    """`device` mounted on a fresh temporary directory for the `with` block; always unmounted
    and the directory removed after."""
    mnt = Path(tempfile.mkdtemp(prefix="sparsecopy-test-mnt-"))
    try:
        mount(device, mnt, fstype, options)
        try:
            yield mnt
        finally:
            unmount(mnt)
    finally:
        mnt.rmdir()


def running(pid: int) -> bool:
    """Whether a process exists and has not exited (a zombie has closed its files)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def fuse_daemons(mount_dir: Path) -> list[int]:
    """Pids of the ntfs-3g processes serving `mount_dir` (they outlive umount for a moment)."""
    pids = []
    wanted = str(mount_dir.resolve()).encode()  # mount(8) passes the absolute path
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ntfs-3g" in args[0] and wanted in args:
            pids.append(int(cmdline.parent.name))
    return pids


def mountpoints_of(device: str) -> list[str]:
    """Where `device` is mounted (from /proc/self/mounts)."""
    mountpoints = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            source, mountpoint = line.split()[:2]
            if source == device:
                mountpoints.append(mountpoint.replace("\\040", " "))
    return mountpoints
