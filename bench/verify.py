"""Is a target a faithful copy? A method that writes few chunks but loses data must not win."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from bench.allocation import table_extents
from bench.disk import DELETED, DirtyDisk
from bench.system import BenchError, Resources

FSCK = {
    "ext4": ["e2fsck", "-f", "-n"],
    "xfs": ["xfs_repair", "-n"],
    "ntfs": ["ntfsfix", "--no-action"],
}
READ_ONLY_MOUNT = {"ext4": ["ro"], "xfs": ["ro", "nouuid"], "ntfs": ["ro"]}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as f:
        while block := f.read(4 * 1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def table_differences(disk: DirtyDisk, target_image: Path) -> list[str]:
    problems = []
    with disk.image.open("rb") as src, target_image.open("rb") as dst:
        for start, length in table_extents(disk.layout):
            src.seek(start)
            dst.seek(start)
            if src.read(length) != dst.read(length):
                problems.append(f"partition table bytes {start}..{start + length} differ")
    return problems


def check_target(disk: DirtyDisk, target_image: Path, mount_dir: Path, res: Resources) -> list[str]:
    """Problems found on the target (empty = faithful): table, fsck, live files, deleted files."""
    layout = disk.layout
    problems = table_differences(disk, target_image)
    device = res.attach(
        target_image, offset=layout.part_start, size=layout.part_size, read_only=True
    )
    try:
        fsck = subprocess.run([*FSCK[layout.fs], device], capture_output=True, text=True)
        if fsck.returncode != 0:
            tail = " | ".join((fsck.stdout + fsck.stderr).strip().splitlines()[-2:])
            problems.append(f"{FSCK[layout.fs][0]} exited {fsck.returncode}: {tail}")
        try:
            res.mount(device, mount_dir, layout.fs, READ_ONLY_MOUNT[layout.fs])
        except BenchError as err:
            return [*problems, f"target does not mount: {err}"]
        try:
            for name, expected in sorted(disk.live_files.items()):
                path = mount_dir / name
                if not path.is_file():
                    problems.append(f"{name} is missing")
                elif file_sha256(path) != expected:
                    problems.append(f"{name} has different content")
            problems += [
                f"deleted {name} is back" for name in DELETED if (mount_dir / name).exists()
            ]
        finally:
            res.umount(mount_dir)
    finally:
        res.detach(device)
    return problems
