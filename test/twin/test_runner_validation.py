"""The runner validates each distinct definition once per twin process (twin/runner/run.mjs
validatedMachine, job.validatedDir from twin/execution.py): the runs after the first skip the
validator's schema compilation, and a definition that fails validation fails every run."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from twin_helpers import run_runner  # type: ignore[import-not-found]

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:m"
VALID = {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True}}}
# asl-validator rejects the unknown field; the interpreter would run it
INVALID = {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": True, "Bogus": 1}}}


def run(
    tmp_path: Path, definition: dict[str, Any], validated: Path
) -> subprocess.CompletedProcess[str]:
    return run_runner(tmp_path, definition, {"x": 1}, MACHINE, 10, validatedDir=str(validated))


def marker(definition: dict[str, Any]) -> str:
    """The marker's name: the hash of the definition and the runner's validation options, as
    JSON.stringify writes them."""
    key = {"definition": definition, "validationOptions": {"checkArn": False}}
    return hashlib.sha256(json.dumps(key, separators=(",", ":")).encode()).hexdigest()


def test_a_definition_is_validated_once_and_an_invalid_one_fails_every_run(tmp_path: Path) -> None:
    validated = tmp_path / "validated"
    validated.mkdir()
    for _ in range(2):
        done = run(tmp_path, VALID, validated)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / "result.json").read_text())["status"] == "SUCCEEDED"
        assert sorted(p.name for p in validated.iterdir()) == [marker(VALID)]
    for _ in range(2):
        done = run(tmp_path, INVALID, validated)
        assert done.returncode != 0
        assert "State machine definition is invalid" in done.stderr, done.stderr
        assert sorted(p.name for p in validated.iterdir()) == [marker(VALID)]
    # the marker is what skips the validation: with the invalid definition's own marker, its
    # run goes ahead (the interpreter ignores the unknown field)
    (validated / marker(INVALID)).write_text("")
    done = run(tmp_path, INVALID, validated)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "SUCCEEDED"
