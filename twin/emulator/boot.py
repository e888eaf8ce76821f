"""Which disk the transfer instance boots from.

Amazon Linux 2023 finds its root filesystem by UUID (`root=UUID=...` on the kernel command line,
the same UUID in /etc/fstab). An AMI built from the same AL2023 release carries a byte-identical
root filesystem, UUID included; when a volume made from such an AMI is present at launch, the
instance can come up with the user's root filesystem as its own (a known EC2 pitfall, issue 7 item
1). The twin is harsh: a volume present at launch (other than the instance's own root) that
carries the UUID the AMI's root carries wins, always.

The twin's transfer AMI ("AL2023 base") is a 1 GiB sparse disk with a GPT and a small ext4 root
of the UUID `AL2023_ROOT_UUID`; the public SSM parameter the launch template resolves answers its
id. The demo's source AMI is built from the same base: its root filesystem has the same UUID.
UUIDs are read from the backing files themselves: partition table (GPT or MBR) -> partition
offsets -> ext4 superblock (offset 1024, UUID at 0x68) or XFS superblock (UUID at 32).
"""

from __future__ import annotations

import json
import struct
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devkit.disks.layout import LINUX, make_gpt

AL2023_ROOT_UUID = "2a7e9c51-5b0d-4c1e-9f3a-a12023b45e01"
TRANSFER_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
TRANSFER_AMI_NAME = "al2023-ami-2023.twin-kernel-6.1-x86_64"
AMAZON_ACCOUNT = "137112412989"  # the owner of Amazon Linux AMIs
ROOT_DEVICE_NAME = "/dev/xvda"
BASE_ROOT_MIB = 64
GIB = 1024**3

_EXT4_MAGIC = 0xEF53
_XFS_MAGIC = b"XFSB"


@dataclass(frozen=True)
class Filesystem:
    offset: int  # bytes from the start of the disk
    size: int
    fstype: str  # "ext4" (ext2/3/4) or "xfs"
    uuid: str


def partition_extents(path: Path) -> list[tuple[int, int]]:
    """(offset, size) of every partition of the disk image (GPT or MBR), or the whole disk when
    it has no partition table."""
    size = path.stat().st_size
    proc = subprocess.run(
        ["sfdisk", "--json", str(path)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        return [(0, size)]
    table = json.loads(proc.stdout)["partitiontable"]
    sector = int(table.get("sectorsize", 512))
    return [(int(p["start"]) * sector, int(p["size"]) * sector) for p in table["partitions"]]


def _probe(f: Any, offset: int, size: int) -> Filesystem | None:
    f.seek(offset + 1024)
    sb = f.read(1024)
    if len(sb) == 1024 and struct.unpack_from("<H", sb, 0x38)[0] == _EXT4_MAGIC:
        return Filesystem(offset, size, "ext4", str(uuid.UUID(bytes=sb[0x68:0x78])))
    f.seek(offset)
    sb = f.read(48)
    if len(sb) == 48 and sb[:4] == _XFS_MAGIC:
        return Filesystem(offset, size, "xfs", str(uuid.UUID(bytes=sb[32:48])))
    return None


def filesystems(path: Path) -> list[Filesystem]:
    """The ext4 and XFS filesystems of a disk image, with their UUIDs."""
    found = []
    with open(path, "rb") as f:
        for offset, size in partition_extents(path):
            fs = _probe(f, offset, size)
            if fs is not None:
                found.append(fs)
    return found


def root_uuid(path: Path) -> str | None:
    """The UUID the instance looks for when it boots an AMI whose root snapshot is `path`: the
    root filesystem's (the largest ext4/XFS filesystem on the disk)."""
    candidates = filesystems(path)
    if not candidates:
        return None
    return max(candidates, key=lambda fs: fs.size).uuid


def build_base_root(path: Path) -> Path:
    """The AL2023 base's root disk: 1 GiB sparse, GPT, one small ext4 root of AL2023_ROOT_UUID."""
    disk = make_gpt(path, GIB, [(BASE_ROOT_MIB, LINUX, "ext4")])
    part = disk.partition(1)
    # mke2fs writes at the partition's offset in the file itself: no loop device, no root (the
    # diskless twin runs without either)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-E", f"offset={part.start}", "-U", AL2023_ROOT_UUID,
         "-L", "/", str(path), f"{part.size // 1024}k"],
        check=True, capture_output=True,
    )  # fmt: skip
    return path
