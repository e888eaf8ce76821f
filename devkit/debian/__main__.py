"""python -m devkit.debian [--out DIR] [--refresh] [--boot]: build (or reuse) the cache, then the
disk and its snapshot taken while mounted; print their paths (and, with --boot, boot the snapshot
BIOS and UEFI)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from devkit.debian.cache import churn_debs, rootfs_tarball
from devkit.debian.dirt import dirty_snapshot
from devkit.debian.disk import build_disk
from devkit.qemu_boot import boot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.debian", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("out/debian-boot"))
    parser.add_argument("--refresh", action="store_true", help="debootstrap and download again")
    parser.add_argument("--boot", action="store_true", help="boot the snapshot, BIOS and UEFI")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tarball = rootfs_tarball(refresh=args.refresh)
    debs = churn_debs(refresh=args.refresh)
    args.out.mkdir(parents=True, exist_ok=True)
    disk = build_disk(args.out / "disk.img", tarball)
    snapshot = args.out / "snapshot.img"
    dirty_snapshot(disk, debs, snapshot)
    print(f"cache:    {tarball}\nchurn:    {debs}\ndisk:     {disk.image.path}")
    print(f"snapshot: {snapshot}\nroot={disk.root_uuid} esp={disk.esp_id}")
    print(f"built in {time.monotonic() - started:.1f} s")
    failed = False
    for firmware in ("bios", "uefi") if args.boot else ():
        result = boot(snapshot, firmware)
        print(json.dumps(asdict(result)))
        failed = failed or not result.boots
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
