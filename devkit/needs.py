"""What the tests and the demo need from this machine beyond the project venv, and which part of
the set-up provides it: so a missing tool is reported by the Debian package that brings it.

`make setup` installs every package of scripts/apt-packages.txt (test/devkit/test_needs.py checks
that each package named here is listed there and really holds the tool). The pytest side of the
same facts (skip, or fail under CI=true) is devkit/pytest_ci.py."""

from __future__ import annotations

import shutil
from pathlib import Path

# Tool -> the Debian package that installs it (dpkg -S).
TOOL_PACKAGES: dict[str, str] = {
    "debootstrap": "debootstrap",
    "qemu-system-x86_64": "qemu-system-x86",
    "grub-install": "grub2-common",
    "grub-mkstandalone": "grub-common",
    "mcopy": "mtools",
    "zstd": "zstd",
    "e2fsck": "e2fsprogs",
    "debugfs": "e2fsprogs",
    "xfs_db": "xfsprogs",
    "mkntfs": "ntfs-3g",
}

# A real Debian disk made bootable and booted in QEMU: test/boot, test/twin/test_debian_boot.py,
# `make demo INPUT=ami OS=debian`.
BOOT_TOOLS = (
    "debootstrap",
    "qemu-system-x86_64",
    "grub-install",
    "grub-mkstandalone",
    "mcopy",
    "zstd",
)

ROOT = "needs root (loop devices, mounts): run as root, as CI does"

# The data plane runs on Amazon Linux 2023's python3 (3.9). Debian bookworm packages no 3.9; the
# image of this machine kind ships one with pyenv (the path below), which the tests use.
PYENV_PYTHON_39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")
PYTHON_39_MISSING = (
    f"needs a Python 3.9 interpreter (python3.9 on PATH or {PYENV_PYTHON_39}; "
    "`pyenv install 3.9.18` provides it)"
)


def missing_tools(tools: tuple[str, ...]) -> str | None:
    """None when every tool is on PATH, else one line naming each missing tool's package."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return None
    named = ", ".join(f"{tool} (Debian package {TOOL_PACKAGES[tool]})" for tool in missing)
    return f"needs {named}: run `make setup` (scripts/apt-packages.txt installs it)"


def python39() -> str | None:
    """A real Python 3.9 interpreter (not a pyenv shim, which may point at another version)."""
    for candidate in (shutil.which("python3.9"), str(PYENV_PYTHON_39)):
        if candidate and "shims" not in candidate and Path(candidate).is_file():
            return candidate
    return None
