"""Commands, loop devices, mounts and kernel counters, with clean-up that survives failures.

Other people attach loop devices on this machine at the same time, so the bench only ever
detaches the devices it attached itself (never `losetup -D`).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class BenchError(Exception):
    """A step of the bench failed; the message says which and what to do."""


def run(cmd: Sequence[str], *, input_text: str | None = None, log: Path | None = None) -> str:
    """Run a command and return its stdout; on failure raise BenchError with its stderr.

    With `log`, the command line and everything it printed are appended to that file.
    """
    proc = subprocess.run(list(cmd), input=input_text, capture_output=True, text=True, check=False)
    if log is not None:
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise BenchError(f"`{' '.join(cmd)}` exited {proc.returncode}: {' | '.join(detail)}")
    return proc.stdout


def drop_caches() -> None:
    """Write back and drop the page cache so the next reads hit the backing files."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def flush_buffers(device: str) -> None:
    run(["blockdev", "--flushbufs", device])


@dataclass(frozen=True)
class IoCounters:
    """Sectors read, written and discarded by a block device, from /sys/block/<dev>/stat."""

    sectors_read: int
    sectors_written: int
    sectors_discarded: int = 0

    @classmethod
    def of(cls, device: str) -> IoCounters:
        fields = Path(f"/sys/block/{Path(device).name}/stat").read_text().split()
        return cls(int(fields[2]), int(fields[6]), int(fields[13]) if len(fields) > 13 else 0)

    def bytes_since(self, earlier: IoCounters) -> tuple[int, int, int]:
        """(bytes read, written, discarded) between `earlier` and this reading (512-byte units)."""
        return (
            (self.sectors_read - earlier.sectors_read) * 512,
            (self.sectors_written - earlier.sectors_written) * 512,
            (self.sectors_discarded - earlier.sectors_discarded) * 512,
        )


def serves(device: str, backing: Path, offset: int) -> bool:
    """Is `device` (still) the loop device over `backing` at `offset`?"""
    sysdir = Path("/sys/block") / Path(device).name / "loop"
    try:
        attached = (sysdir / "backing_file").read_text().strip()
        at = int((sysdir / "offset").read_text().strip())
    except (OSError, ValueError):
        return False
    return attached == str(backing.resolve()) and at == offset


def fuse_daemons(mount_dir: Path) -> list[int]:
    """Pids of ntfs-3g processes serving `mount_dir` (they outlive umount for a moment)."""
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


class Resources:
    """Loop devices and mounts this bench set up, released in reverse order by close()."""

    def __init__(self) -> None:
        self._loops: dict[str, tuple[Path, int]] = {}  # device -> (backing file, offset)
        self._mounts: list[Path] = []

    def attach(
        self,
        backing: Path,
        *,
        offset: int = 0,
        size: int | None = None,
        read_only: bool = False,
        direct_io: bool = False,
    ) -> str:
        """A loop device over `backing` (a file, or another loop device to stack on it).

        `direct_io`: the loop device reads and writes its backing with O_DIRECT, so a device
        stacked on another passes each request straight through, with no second page cache
        and no second read-ahead in between.
        """
        cmd = ["losetup", "--find", "--show", "--offset", str(offset)]
        if size is not None:
            cmd += ["--sizelimit", str(size)]
        if read_only:
            cmd.append("--read-only")
        if direct_io:
            cmd.append("--direct-io=on")
        device = run([*cmd, str(backing)]).strip()
        if not device.startswith("/dev/loop"):
            raise BenchError(f"losetup printed {device!r} instead of a loop device for {backing}")
        self._loops[device] = (backing, offset)
        absorb_stale_write_error(device)
        return device

    def detach(self, device: str) -> None:
        if device not in self._loops:
            raise BenchError(f"refusing to detach {device}: this bench did not attach it")
        backing, offset = self._loops[device]
        # A device that is still open elsewhere (udev, a daemon that outlives umount) is only
        # marked for auto-clear, so wait until it no longer serves our file. Never retry
        # blindly: once freed, the same name may already be another user's new device.
        for attempt in range(20):
            subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
            if not serves(device, backing, offset):
                del self._loops[device]
                return
            time.sleep(0.1 * (attempt + 1))
        raise BenchError(f"{device} still serves {backing}: detach it with losetup -d {device}")

    def mount(self, device: str, target: Path, fs: str, options: Sequence[str] = ()) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        fstype = "ntfs-3g" if fs == "ntfs" else fs
        opts = ["-o", ",".join(options)] if options else []
        run(["mount", "-t", fstype, *opts, device, str(target)])
        self._mounts.append(target)
        return target

    def umount(self, target: Path) -> None:
        daemons = fuse_daemons(target)
        for attempt in range(10):
            proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            if attempt == 9:
                raise BenchError(f"could not unmount {target}: {proc.stderr.strip()}")
            time.sleep(0.5)
        self._mounts.remove(target)
        # ntfs-3g finishes writing and closes the device after umount returns.
        for _ in range(100):
            if not any(Path(f"/proc/{pid}").exists() for pid in daemons):
                return
            time.sleep(0.1)
        raise BenchError(f"ntfs-3g for {target} did not exit within 10 s of umount")

    def close(self) -> list[str]:
        """Release everything still held; return one message per thing that would not go."""
        problems: list[str] = []
        for target in reversed(list(self._mounts)):
            try:
                self.umount(target)
            except BenchError as err:
                problems.append(str(err))
                if target in self._mounts:
                    subprocess.run(["umount", "--lazy", str(target)], capture_output=True)
                    self._mounts.remove(target)
        for device in reversed(list(self._loops)):
            try:
                self.detach(device)
            except BenchError as err:
                problems.append(str(err))
        return problems
