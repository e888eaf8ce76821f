"""The demo's dirty disks, built with the data-plane tests' image builders (test/dataplane)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GIB = 1024**3
FILESYSTEMS = ("ext4", "xfs", "ntfs", "bare-ext4")


def images() -> ModuleType:
    """test/dataplane/images.py (not a package: loaded by path, once)."""
    name = "dataplane_images"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO / "test" / "dataplane" / "images.py"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the twin builds its disks with it")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build(fs: str, path: Path, seed: int = 0, root_uuid: str | None = None) -> Any:
    """A dirty 1 GiB disk (EBS volume sizes are whole GiB): files written, some deleted.
    root_uuid: the root filesystem's UUID (ext4 and xfs: a disk of an AMI built from a base)."""
    img = images()
    if root_uuid is not None and fs not in ("ext4", "xfs"):
        raise ValueError(f"FS={fs}: only the ext4 and xfs disks have a root filesystem UUID to set")
    builders = {
        # seed 000's experiment: GPT with BIOS boot, EFI and an ext4 root
        "ext4": lambda: img.build_gpt_efi_ext4(path, size=GIB, seed=seed + 1, root_uuid=root_uuid),
        "xfs": lambda: img.build_gpt_xfs(path, size=GIB, seed=seed + 2, root_uuid=root_uuid),
        "ntfs": lambda: img.build_mbr_ntfs(path, size=GIB, seed=seed + 3),
        "bare-ext4": lambda: img.build_bare_ext4(path, size=GIB, seed=seed + 5),
    }
    if fs not in builders:
        raise ValueError(f"FS={fs} is not one of {', '.join(FILESYSTEMS)}")
    return builders[fs]()
