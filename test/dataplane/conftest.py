"""Shared fixtures: run the sparsecopy CLI, attach images as loop devices, blank targets."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROGRAM = REPO / "ssm-documents" / "sparsecopy"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "ssm-documents"))
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # images.py counts chunks with bench/chunks.py

import images  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="needs root (loop devices, mount)")
        for item in items:
            if "needs_root" in item.keywords:
                item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_root: uses loop devices and mounts")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict:
        """The JSON object on the last (and only) line of stdout."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1, f"stdout must be exactly one JSON line, got: {self.stdout!r}"
        return json.loads(lines[0])

    @property
    def error_line(self) -> str:
        return self.stderr.strip().splitlines()[-1]


def sparsecopy(*args: str, program: Path = PROGRAM, env: dict[str, str] | None = None) -> Run:
    """Run the program the way the Command document does: python3 <dir or zip> ARGS."""
    proc = subprocess.run(
        [sys.executable, str(program), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


@contextlib.contextmanager
def attached(path: Path) -> Iterator[str]:
    """The whole image as one loop device (what an attached EBS volume looks like)."""
    with images.loop_device(path) as device:
        yield device


def blank_like(path: Path, dest: Path) -> Path:
    """A never-written target file of the same size."""
    images.create_sparse(dest, path.stat().st_size)
    return dest


def working_copy(disk: images.DiskImage, dest: Path) -> images.DiskImage:
    """A private copy of a source image (copying replays journals on the source)."""
    images.run("cp", "--sparse=always", str(disk.path), str(dest))
    return images.DiskImage(dest, disk.size, disk.table, list(disk.partitions), disk.files)


@pytest.fixture
def no_leaks(tmp_path: Path) -> Iterator[None]:
    """Fail a test that leaves loop devices on its own files attached (other test runs and
    other users share the loop devices, so only this test's directory counts)."""
    yield
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    leaked = [line for line in attached.splitlines() if str(tmp_path) in line]
    assert not leaked, f"loop devices left attached: {leaked}"
