"""Commands, kernel counters, and the loop devices and mounts a bench run holds (devkit.loop,
devkit.mounts), with clean-up that survives failures."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devkit.loop import LoopDevices
from devkit.mounts import mount, unmount


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


class Resources(LoopDevices):
    """Loop devices (devkit.loop.LoopDevices) and mounts this bench set up, released in reverse
    order by close(); every failure is a BenchError."""

    def __init__(self) -> None:
        super().__init__("this bench", error=BenchError)
        self._mounts: list[Path] = []

    def mount(self, device: str, target: Path, fs: str, options: Sequence[str] = ()) -> Path:
        target.mkdir(parents=True, exist_ok=True)
        try:
            mount(device, target, fs, ",".join(options))
        except RuntimeError as err:
            raise BenchError(str(err)) from err
        self._mounts.append(target)
        return target

    def umount(self, target: Path) -> None:
        try:
            unmount(target)
        except RuntimeError as err:
            if not target.is_mount():  # unmounted, but ntfs-3g did not exit
                self._mounts.remove(target)
            raise BenchError(str(err)) from err
        self._mounts.remove(target)

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
        return problems + self.detach_all()
