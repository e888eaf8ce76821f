"""The dirtied Debian disk's crash-consistent snapshot image, built once per machine and copied to
each test that needs it.

Building it (build_disk: the tree extracted, GRUB installed; dirty_snapshot: packages installed
and purged, big files written and deleted, the copy taken while mounted) costs a minute or two of
both cores, and `make test` needs it four times side by side (the data plane's progress test, the
boot proof, the twin's two Debian boots), each of which only reads it. So the first one builds it
under out/cache/debian-bookworm/, keyed by the tree's cache key and the source of devkit/debian/
and devkit/disks/,
and every one gets its own copy with the same allocation (devkit.chunks.copy_image)."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import shutil
import tempfile
from pathlib import Path

from devkit.chunks import copy_image
from devkit.debian.cache import CACHE_ROOT, building, cache_key, churn_debs, rootfs_tarball
from devkit.debian.dirt import dirty_snapshot
from devkit.debian.disk import DebianDisk, build_disk

HERE = Path(__file__).resolve().parent
BUILDERS = (HERE, HERE.parent / "disks")  # the disk's layout comes from devkit/disks


def _key() -> str:
    """The tree's key and a hash of what builds and dirties the disk."""
    digest = hashlib.sha256()
    for source in sorted(p for d in BUILDERS for p in d.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return f"{cache_key()}-dirty-{digest.hexdigest()[:12]}"


def dirty_debian_snapshot(dest: Path, cache: Path = CACHE_ROOT) -> DebianDisk:
    """The dirtied disk's snapshot as a file at `dest` (its layout and identities with it)."""
    image, meta = cache / f"{_key()}.img", cache / f"{_key()}.pickle"
    if not meta.exists():
        tarball, debs = rootfs_tarball(cache), churn_debs(cache)  # they take the lock themselves
        with building(cache):
            if not meta.exists():  # else another process built it while this one waited
                _build(tarball, debs, cache, image, meta)
    disk: DebianDisk = pickle.loads(meta.read_bytes())
    copy_image(image, dest)
    return dataclasses.replace(disk, image=disk.image.copy_at(dest))


def _build(tarball: Path, debs: Path, cache: Path, image: Path, meta: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="dirty-debian-", dir=cache))
    try:
        disk = build_disk(work / "disk.img", tarball)
        snapshot = work / "snapshot.img"
        dirty_snapshot(disk, debs, snapshot)
        snapshot.rename(image)
        meta.write_bytes(pickle.dumps(dataclasses.replace(disk, image=disk.image.copy_at(image))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
