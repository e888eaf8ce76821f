"""Block devices: size, in-use checks, offset loop devices, and running the system tools."""

import contextlib
import fcntl
import os
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Optional

from .errors import Failure

BLKGETSIZE64 = 0x80081272
BLKSSZGET = 0x1268
BLKFLSBUF = 0x1261


def run(args: Sequence[str], check: bool = True) -> "subprocess.CompletedProcess[str]":
    """Run a system tool, capturing its output; raise Failure naming the tool when it fails."""
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, errors="replace", check=False
        )
    except FileNotFoundError as exc:
        raise Failure(f"{args[0]} is not installed: install it or use another method") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise Failure(
            f"{' '.join(args)} failed with exit code {proc.returncode}: "
            f"{detail[-1] if detail else 'no output'}"
        )
    return proc


def run_bounded(
    args: Sequence[str], seconds: float, max_output: int
) -> "tuple[Optional[int], str]":
    """Run a checker that may not stop on damaged input (e2fsck -n loops on some corrupt
    filesystems, printing the same problems again and again): its exit code and output, or None
    and the output so far when it ran longer than ``seconds`` or printed more than
    ``max_output`` bytes (it is then killed)."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
        except FileNotFoundError as exc:
            raise Failure(f"{args[0]} is not installed: install it or use another method") from exc
        deadline = time.monotonic() + seconds
        code: Optional[int] = None
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline or os.fstat(out.fileno()).st_size > max_output:
                    proc.kill()
                    proc.wait()
                    break
        out.seek(0)
        return code, out.read(max_output).decode(errors="replace")


def size_of(fd: int) -> int:
    """Size in bytes of an open block device or regular file."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISBLK(mode):
        buf = fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8)
        return int(struct.unpack("<Q", buf)[0])
    return os.fstat(fd).st_size


def sector_size(fd: int) -> int:
    """Logical sector size (512 on EBS and loop devices)."""
    if stat.S_ISBLK(os.fstat(fd).st_mode):
        buf = fcntl.ioctl(fd, BLKSSZGET, b"\0" * 4)
        return int(struct.unpack("<i", buf)[0])
    return 512


def _dev_numbers(path: str) -> Optional[str]:
    st = os.stat(path)
    if not stat.S_ISBLK(st.st_mode):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def _sysfs_dir(numbers: str) -> str:
    return os.path.realpath(f"/sys/dev/block/{numbers}")


def related_numbers(path: str) -> list[str]:
    """major:minor of the device and of every partition the kernel shows for it."""
    numbers = _dev_numbers(path)
    if numbers is None:
        return []
    found = [numbers]
    sysdir = _sysfs_dir(numbers)
    try:
        entries = os.listdir(sysdir)
    except OSError:
        return found
    for entry in entries:
        dev_file = os.path.join(sysdir, entry, "dev")
        if os.path.exists(os.path.join(sysdir, entry, "partition")) and os.path.exists(dev_file):
            with open(dev_file) as f:
                found.append(f.read().strip())
    return found


def stacked_loop_numbers(numbers: Sequence[str]) -> list[str]:
    """major:minor of loop devices set up over these devices, transitively (a loop over a loop
    over the disk counts too). On a kernel that does not scan partition tables, an offset loop
    device over the disk is how one of its partitions gets mounted: a mount there uses the disk."""
    loops: dict[str, str] = {}
    try:
        entries = os.listdir("/sys/block")
    except OSError:
        return []
    for entry in entries:
        backing = os.path.join("/sys/block", entry, "loop", "backing_file")
        dev_file = os.path.join("/sys/block", entry, "dev")
        with contextlib.suppress(OSError), open(backing) as f, open(dev_file) as g:
            loops[g.read().strip()] = f.read().strip()
    found: list[str] = []
    frontier = set(numbers)
    while frontier:
        layer = []
        for dev, backing in loops.items():
            if dev in found or dev in numbers:
                continue
            with contextlib.suppress(OSError):
                if _dev_numbers(backing) in frontier:
                    layer.append(dev)
        found += layer
        frontier = set(layer)
    return found


def _mounted_numbers() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[2] for line in f if line.strip()]


def _swap_numbers() -> list[str]:
    numbers = []
    with open("/proc/swaps") as f:
        for line in f.readlines()[1:]:
            name = line.split()[0]
            with contextlib.suppress(OSError):
                dev = _dev_numbers(name)
                if dev:
                    numbers.append(dev)
    return numbers


def root_disk_numbers() -> list[str]:
    """major:minor of the disk that holds / (and of its partitions)."""
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        if fields[4] == "/":
            sysdir = _sysfs_dir(fields[2])
            if os.path.exists(os.path.join(sysdir, "partition")):
                sysdir = os.path.dirname(sysdir)
            try:
                with open(os.path.join(sysdir, "dev")) as f:
                    disk = f.read().strip()
            except OSError:
                return [fields[2]]
            return [disk, fields[2]]
    return []


def in_use(path: str) -> Optional[str]:
    """Why the device must not be copied to or from (mounted, swap, held, root), or None."""
    numbers = related_numbers(path)
    if not numbers:
        return None
    if set(numbers) & set(root_disk_numbers()):
        return f"{path} is the root disk of this instance: pick another device"
    in_use_numbers = set(numbers) | set(stacked_loop_numbers(numbers))
    if in_use_numbers & set(_mounted_numbers()):
        return f"{path} (or one of its partitions) is mounted: unmount it first"
    if in_use_numbers & set(_swap_numbers()):
        return f"{path} (or one of its partitions) is in use as swap: swapoff it first"
    for number in numbers:
        holders = os.path.join(_sysfs_dir(number), "holders")
        if os.path.isdir(holders) and os.listdir(holders):
            return (
                f"{path} is held by {', '.join(os.listdir(holders))} (LVM, RAID or dm): "
                "deactivate it first"
            )
    return None


@contextlib.contextmanager
def partition_device(
    disk: str, start: int, size: int, disk_size: int, read_only: bool = False
) -> Iterator[str]:
    """A block device for one partition: the disk itself or an offset loop device.

    Offset loop devices work on every kernel (this one does not scan partition tables) and are
    detached again even on failure.
    """
    if start == 0 and size == disk_size:
        yield disk
        return
    args = ["losetup", "--find", "--show", "--offset", str(start), "--sizelimit", str(size)]
    if read_only:
        args.append("--read-only")
    device = run([*args, disk]).stdout.strip()
    try:
        yield device
    finally:
        detach(device, disk, start)
        flush(disk)


def _serves(device: str, backing: str, offset: int) -> bool:
    """Whether the loop device is still attached to ``backing`` at ``offset``."""
    sysdir = f"/sys/block/{os.path.basename(device)}/loop"
    try:
        with open(f"{sysdir}/backing_file") as f:
            attached = f.read().strip()
        with open(f"{sysdir}/offset") as f:
            at = int(f.read().strip())
    except (OSError, ValueError):
        return False
    return attached == os.path.realpath(backing) and at == offset


def detach(device: str, backing: str, offset: int = 0) -> None:
    """Detach a loop device this program attached. Retries only while the device still serves
    our file: once freed, the same name may already belong to someone else's new device."""
    for attempt in range(30):
        if run(["losetup", "--detach", device], check=False).returncode == 0:
            return
        if not _serves(device, backing, offset):
            return
        time.sleep(0.1 * (attempt + 1))
    raise Failure(f"could not detach loop device {device}: detach it with losetup -d {device}")


def flush(path: str) -> None:
    """Write back and drop cached pages of a device, so direct reads see what tools wrote."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        if stat.S_ISBLK(os.fstat(fd).st_mode):
            with contextlib.suppress(OSError):
                fcntl.ioctl(fd, BLKFLSBUF, 0)
    finally:
        os.close(fd)


@contextlib.contextmanager
def mounted(device: str, fstype: str, options: str) -> Iterator[str]:
    """Mount on a fresh temporary directory; always unmount and remove it."""
    mnt = tempfile.mkdtemp(prefix="sparsecopy-")
    try:
        run(["mount", "-t", fstype, "-o", options, device, mnt])
        try:
            yield mnt
        finally:
            for attempt in range(30):
                if run(["umount", mnt], check=False).returncode == 0:
                    break
                time.sleep(0.1 * (attempt + 1))
            else:
                raise Failure(f"could not unmount {mnt}: unmount it by hand")
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(mnt)
