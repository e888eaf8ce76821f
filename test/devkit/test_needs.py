"""devkit/needs.py: the tools named there come from the packages named there, which the set-up
installs (scripts/apt-packages.txt)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from devkit import needs

REPO = Path(__file__).resolve().parents[2]


def _apt_packages() -> set[str]:
    lines = (REPO / "scripts" / "apt-packages.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_every_package_named_is_one_the_set_up_installs() -> None:
    assert set(needs.TOOL_PACKAGES.values()) <= _apt_packages()
    assert set(needs.BOOT_TOOLS) <= set(needs.TOOL_PACKAGES)


def test_each_tool_is_in_the_package_named() -> None:
    """dpkg's own record (one dpkg -S for all: it reads the whole file database); with merged
    /usr, dpkg may list a file under /sbin or /bin."""
    paths: dict[str, str] = {}
    for tool in needs.TOOL_PACKAGES:
        found = shutil.which(tool)
        assert found, needs.missing_tools((tool,))
        for path in {found, str(Path(found).resolve())}:
            paths[path] = paths[path.removeprefix("/usr")] = tool
    proc = subprocess.run(["dpkg", "-S", *paths], capture_output=True, text=True, check=False)
    owners: dict[str, set[str]] = {tool: set() for tool in needs.TOOL_PACKAGES}
    for line in proc.stdout.splitlines():
        packages, path = line.split(": ", 1)
        owners[paths[path]] |= {p.split(":")[0] for p in packages.split(", ")}
    assert {tool: needs.TOOL_PACKAGES[tool] in got for tool, got in owners.items()} == {
        tool: True for tool in needs.TOOL_PACKAGES
    }, owners


def test_a_missing_tool_is_named_with_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "zstd").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert needs.missing_tools(("zstd",)) is None
    assert needs.missing_tools(("zstd", "grub-install", "mcopy")) == (
        "needs grub-install (Debian package grub2-common), mcopy (Debian package mtools): "
        "run `make setup` (scripts/apt-packages.txt installs it)"
    )


def test_python39_is_a_real_interpreter_not_a_shim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3.9").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(shims))
    monkeypatch.setattr(needs, "PYENV_PYTHON_39", tmp_path / "none" / "python3.9")
    assert needs.python39() is None
    real = tmp_path / "bin"
    real.mkdir()
    (real / "python3.9").symlink_to("/bin/true")
    monkeypatch.setenv("PATH", f"{shims}:{real}")
    assert needs.python39() is None  # which() stops at the shim
    monkeypatch.setenv("PATH", str(real))
    assert needs.python39() == str(real / "python3.9")
