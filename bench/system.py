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


class Resources:
    """Loop devices and mounts this bench set up, released in reverse order by close()."""

    def __init__(self) -> None:
        self._loops: list[str] = []
        self._mounts: list[Path] = []

    def attach(
        self, backing: Path, *, offset: int = 0, size: int | None = None, read_only: bool = False
    ) -> str:
        cmd = ["losetup", "--find", "--show", "--offset", str(offset)]
        if size is not None:
            cmd += ["--sizelimit", str(size)]
        if read_only:
            cmd.append("--read-only")
        device = run([*cmd, str(backing)]).strip()
        if not device.startswith("/dev/loop"):
            raise BenchError(f"losetup printed {device!r} instead of a loop device for {backing}")
        self._loops.append(device)
        return device

    def detach(self, device: str) -> None:
        if device not in self._loops:
            raise BenchError(f"refusing to detach {device}: this bench did not attach it")
        # udev or a just-finished umount can hold the device for a moment.
        for attempt in range(10):
            proc = subprocess.run(["losetup", "--detach", device], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            if attempt == 9:
                raise BenchError(f"could not detach {device}: {proc.stderr.strip()}")
            time.sleep(0.5)
        self._loops.remove(device)

    def mount(self, device: str, target: Path, fs: str, options: Sequence[str] = ()) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        fstype = "ntfs-3g" if fs == "ntfs" else fs
        opts = ["-o", ",".join(options)] if options else []
        run(["mount", "-t", fstype, *opts, device, str(target)])
        self._mounts.append(target)
        return target

    def umount(self, target: Path) -> None:
        for attempt in range(10):
            proc = subprocess.run(["umount", str(target)], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            if attempt == 9:
                raise BenchError(f"could not unmount {target}: {proc.stderr.strip()}")
            time.sleep(0.5)
        self._mounts.remove(target)

    def close(self) -> list[str]:
        """Release everything still held; return one message per thing that would not go."""
        problems: list[str] = []
        for target in reversed(list(self._mounts)):
            try:
                self.umount(target)
            except BenchError as err:
                problems.append(str(err))
                subprocess.run(["umount", "--lazy", str(target)], capture_output=True)
                self._mounts.remove(target)
        for device in reversed(list(self._loops)):
            try:
                self.detach(device)
            except BenchError as err:
                problems.append(str(err))
        return problems
