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

import jsonschema
import pytest

from devkit import chunks, disks

# pytest's `pythonpath` (pyproject.toml) puts the repository root (devkit) and ssm-documents
# (sparsecopy) on sys.path.
REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "ssm-documents" / "sparsecopy"
SUMMARY_SCHEMA = json.loads((REPO / "contract" / "schemas" / "summary.schema.json").read_text())


def follows_the_contract(line: dict) -> dict:
    """line, checked against contract/schemas/summary.schema.json: the job's standard output
    line (a copy's, an inspection's, or the error line, definitions/errorLine) as
    check_compaction accepts it; jsonschema.ValidationError else."""
    schema = SUMMARY_SCHEMA
    if "error" in line:
        schema = {"$ref": "#/definitions/errorLine", "definitions": schema["definitions"]}
    jsonschema.validate(line, schema, cls=jsonschema.Draft7Validator)
    return line


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
    with disks.loop_device(path) as device:
        yield device


def blank_like(path: Path, dest: Path) -> Path:
    """A never-written target file of the same size."""
    disks.create_sparse(dest, path.stat().st_size)
    return dest


def working_copy(disk: disks.DiskImage, dest: Path) -> disks.DiskImage:
    """A private copy of a source image (copying replays journals on the source), with the same
    allocation (the allocated zeros a snapshot holds stay data)."""
    chunks.copy_image(disk.path, dest)
    copy = disk.copy_at(dest)
    copy.files = disk.files
    return copy


@pytest.fixture
def no_leaks(tmp_path: Path) -> Iterator[None]:
    """Fail a test that leaves loop devices on its own files attached (other test runs and
    other users share the loop devices, so only this test's directory counts)."""
    yield
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    leaked = [line for line in attached.splitlines() if str(tmp_path) in line]
    assert not leaked, f"loop devices left attached: {leaked}"
