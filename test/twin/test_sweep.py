"""The sweep (twin/sweep.py): its plan comes from the synthesized definition, and a
representative part of it runs here (`make test`); `make sweep` runs every case (docs/sweep.md).

The part run here: one kind at each key state, every kind at least three times, chosen so that it
stays well under 8 minutes on 2 cores; the scenario tests (test_scenarios.py) add error@Report,
abort@Launch transfer instance, throttle@Check instance and lost@Check compaction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twin.emulator.faults import KINDS
from twin.execution import task_states
from twin.sweep import plan, sweep, table

REPO = Path(__file__).resolve().parents[2]

REPRESENTATIVE = [
    "error@Launch transfer instance",
    "error@Attach volumes",
    "error@Check compaction",
    "error@Create snapshots",
    "error@Check snapshots",
    "error@Register image",
    "error@Teardown",
    "abort@Attach volumes",
    "abort@Create snapshots",
    "abort@Check snapshots",
    "throttle@Check snapshots",
    "throttle@Report",
    "throttle@Attach volumes",
    "lost@Attach volumes",
    "lost@Create snapshots",
    "lost@Check snapshots",
]


def test_plan_covers_every_task_state_and_kind(cdk_out: Path) -> None:
    cases = plan(cdk_out, None, None)
    states = {c["state"] for c in cases}
    assert {c["kind"] for c in cases} == set(KINDS)
    # every Task state gets error, throttle and abort; lost only where an instance can exist
    for state in states:
        kinds = {c["kind"] for c in cases if c["state"] == state}
        assert {"error", "throttle", "abort"} <= kinds, state
    lost = {c["state"] for c in cases if c["kind"] == "lost"}
    assert "Check compaction" in lost and "Attach volumes" in lost
    assert "Prepare" not in lost and "Launch transfer instance" not in lost
    assert "Teardown" not in lost
    assert {c["input"] for c in cases if c["state"] == "Register image"} == {"ami"}
    with pytest.raises(SystemExit, match="not Task states"):
        plan(cdk_out, ["No such state"], None)


def test_representative_part_of_the_sweep_holds(cdk_out: Path, tmp_path: Path) -> None:
    rows = sweep(cdk_out, tmp_path / "sweep", workers=2, pairs=REPRESENTATIVE)
    assert len(rows) == len(REPRESENTATIVE)
    (tmp_path / "sweep" / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    broken = [
        (r["kind"], r["state"], r.get("execution_status"), r.get("error"), r.get("leaks"))
        for r in rows
        if not r.get("holds")
    ]
    assert not broken, table(rows, 0)
    # The faults took effect where the run passes the state.
    assert all(r["fault_applied"] for r in rows if r["state"] != "Register image"), table(rows, 0)


def test_task_states_include_nested_branches() -> None:
    definition = {
        "States": {
            "A": {"Type": "Task"},
            "P": {"Type": "Parallel", "Branches": [{"States": {"B": {"Type": "Task"}}}]},
            "M": {"Type": "Map", "ItemProcessor": {"States": {"C": {"Type": "Task"}}}},
            "W": {"Type": "Wait"},
        }
    }
    assert task_states(definition) == ["A", "B", "C"]
