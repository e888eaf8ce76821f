"""Churn on the Debian disk, then a crash-consistent copy of the image taken while its root is
still mounted read-write, with writes in flight: what an EBS snapshot of a running instance holds.

The copy is a `cp`, not a point-in-time image: the root is mounted with commit=600 (no periodic
journal commit while cp reads) and everything the snapshot must show is synced first, so the copy
is the state at the last commit plus, at most, data in blocks that state calls free. Its ext4
needs recovery; the guest kernel (and sparsecopy) replay the journal."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from devkit.chunks import copy_image
from devkit.commands import run
from devkit.debian.disk import ROOT_PART, DebianDisk
from devkit.disks.image import MIB
from devkit.disks.layout import partition_loop
from devkit.mounts import mounted, unmount

PURGED = (
    "python3-minimal",
    "python3.11-minimal",
    "libpython3.11-minimal",
    "vim-tiny",
    "vim-common",
)
# dpkg -i of a set does not order Pre-Depends: these go in a second pass.
SECOND_PASS = ("python3-minimal_", "vim-tiny_")


def dirty_snapshot(disk: DebianDisk, debs: Path, snapshot: Path) -> None:
    """Install and purge packages, write and delete big files, leave an orphan and writes in
    flight, and copy the image to `snapshot` (sparse) while the root is mounted."""
    with (
        partition_loop(disk.image, ROOT_PART) as device,
        mounted(device, "ext4", "commit=600") as root,
    ):
        churn_packages(root, debs)
        write_random(root / "var/tmp/big-deleted", 300)
        write_random(root / "root/big-kept", 64)
        sync(root)
        (root / "var/tmp/big-deleted").unlink()
        sync(root)  # the delete must be durable, else the crash image still holds the 300 MiB
        orphan = os.open(root / "var/tmp/orphan", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            # deleted while open: only journal replay / orphan cleanup frees its blocks
            os.write(orphan, os.urandom(32 * MIB))
            sync(root)
            (root / "var/tmp/orphan").unlink()
            sync(root)
            write_random(root / "var/tmp/inflight", 40, durable=False)  # absent, as after a crash
            (root / "root/last-write").write_text("written just before the snapshot\n")
            snapshot.unlink(missing_ok=True)
            copy_image(disk.image.path, snapshot)
        finally:
            os.close(orphan)


def churn_packages(root: Path, debs: Path) -> None:
    """dpkg -i the cached .debs in the mounted tree (two passes for Pre-Depends), then purge
    most of them again with apt-get (offline)."""
    staging = root / "var/tmp/debs"
    staging.mkdir(parents=True, exist_ok=True)
    for deb in debs.glob("*.deb"):
        shutil.copyfile(deb, staging / deb.name)
    names = sorted(p.name for p in staging.glob("*.deb"))
    first = [n for n in names if not n.startswith(SECOND_PASS)]
    second = [n for n in names if n.startswith(SECOND_PASS)]
    with chroot_mounts(root):
        for batch in (first, second):
            if batch:
                chroot(root, "dpkg", "-i", *(f"/var/tmp/debs/{n}" for n in batch))
        shutil.rmtree(staging)
        chroot(root, "apt-get", "-q", "-y", "purge", *PURGED)


def chroot(root: Path, *args: str) -> None:
    env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    run("env", "-i", *(f"{k}={v}" for k, v in env.items()), "chroot", str(root), *args)


@contextlib.contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """/dev, /dev/pts, /proc and /sys bound into the tree for the `with` block."""
    done: list[Path] = []
    try:
        for name in ("dev", "dev/pts", "proc", "sys"):
            run("mount", "--bind", f"/{name}", str(root / name))
            done.append(root / name)
        yield
    finally:
        for target in reversed(done):
            unmount(target)


def write_random(path: Path, mib: int, *, durable: bool = True) -> None:
    with path.open("wb") as f:
        for _ in range(mib):
            f.write(os.urandom(MIB))
        if durable:
            f.flush()
            os.fsync(f.fileno())


def sync(root: Path) -> None:
    run("sync", "-f", str(root))
