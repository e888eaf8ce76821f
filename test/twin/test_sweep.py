"""The sweep (twin/sweep.py): its plan comes from the synthesized definition, and `make test`
runs a representative part of it diskless (each case's data plane plans its disks from the
recording of real runs, twin/emulator/replay.py) plus a few cases on real disks, one for each
target and input the sweep runs; `make sweep` runs every case diskless (docs/sweep.md), `make
sweep-disks` every case on real disks.

The diskless part: one kind at each key state, every kind at least three times (20 cases; the
cases run the default input, target snapshot, except Create snapshots', which only target volume
reaches, and Register image's, INPUT=ami). On real disks: abort@Check compaction (the default
input, target snapshot: aborted while the instance puts blocks), error@Create snapshots (target
volume) and abort@Register image (INPUT=ami); the scenario tests add real-disk runs of both
targets and both inputs, with faults (test_scenarios.py, test_direct_snapshot.py).
Three cases lie on recovery paths (the failure chain, the warnings chain, the relaunch path):
they run with the opener fault that leads there (twin/sweep.py RECOVERY_OPENERS).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from twin.emulator.faults import (
    EBS_BEHAVIOURS,
    KINDS,
    FaultError,
    FaultList,
    Faults,
    StateFault,
    parse,
)
from twin.execution import Machine, task_states
from twin.sweep import openers, plan, sweep, table, target_coverage, volume_only_states

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
    # the direct path: aborted while the instance puts blocks into the started snapshots (the
    # cleanup workflow deletes them pending); Create snapshots above runs with target volume
    "abort@Check compaction",
    # recovery paths, each behind its opener fault
    "error@Report failure",
    "abort@Teardown with warnings",
    "error@Teardown before relaunch",
    # AWS's EBS direct behaviours made stronger for a whole run (state "-"): each run must
    # succeed and meet its behaviour (twin/sweep.py behaviour_cases)
    "ebs-not-found@-",
    "ebs-long-seal@-",
    "ebs-account-quota@-",
    "credentials-near-expiry@-",
]
# on real disks: one case for each target and input (the others run diskless)
ON_DISKS = ["abort@Check compaction", "error@Create snapshots", "abort@Register image"]
# diskless cases run this many at a time (no loop device; each emulator on a port of its own):
# they are CPU-bound, 2 on this 2-core machine
WORKERS = int(os.environ.get("TWIN_SWEEP_WORKERS") or 2)


def test_plan_covers_every_task_state_and_kind(cdk_out: Path) -> None:
    cases = plan(cdk_out, None, None)
    states = {c["state"] for c in cases}
    assert {c["kind"] for c in cases} == set(KINDS) | set(EBS_BEHAVIOURS)
    # each EBS behaviour once, as a whole run of the default input (no state)
    behaviours = [c for c in cases if c["kind"] in EBS_BEHAVIOURS]
    assert [c["kind"] for c in behaviours] == list(EBS_BEHAVIOURS)
    assert {(c["state"], c["input"], c["target"]) for c in behaviours} == {("-", "snapshot", "")}
    assert not [c for c in plan(cdk_out, ["Report"], None) if c["kind"] in EBS_BEHAVIOURS]
    # every Task state gets error, throttle and abort; lost only where an instance can exist
    for state in states - {"-"}:
        kinds = {c["kind"] for c in cases if c["state"] == state}
        assert {"error", "throttle", "abort"} <= kinds, state
    lost = {c["state"] for c in cases if c["kind"] == "lost"}
    assert "Check compaction" in lost and "Attach volumes" in lost
    assert "Prepare" not in lost and "Launch transfer instance" not in lost
    assert "Teardown" not in lost
    assert {c["input"] for c in cases if c["state"] == "Register image"} == {"ami"}
    # the states a single fault cannot reach run behind the opener of their recovery path
    opener = {c["state"]: c["opener"] for c in cases}
    assert opener["Teardown before relaunch"] == "lost@Check compaction"
    assert opener["Teardown with warnings"] == opener["Report with warnings"] == "error@Report"
    assert opener["Teardown after failure"] == opener["Report failure"] == "error@Check compaction"
    assert opener["Check compaction"] == opener["Report"] == opener["Teardown"] == ""
    # the Task states only target volume reaches run with it; the others with the default input
    target = {c["state"]: c["target"] for c in cases}
    assert {s for s, t in target.items() if t == "volume"} == {"Create snapshots"}, target
    with pytest.raises(SystemExit, match="not Task states"):
        plan(cdk_out, ["No such state"], None)


def assert_holds(rows: list[dict[str, Any]], out: Path) -> None:
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=str))
    broken = [
        (r["kind"], r["state"], r.get("execution_status"), r.get("error"), r.get("leaks"))
        for r in rows
        if not r.get("holds")
    ]
    assert not broken, table(rows, 0)


def test_representative_part_of_the_sweep_holds_diskless(cdk_out: Path, tmp_path: Path) -> None:
    rows = sweep(cdk_out, tmp_path / "sweep", workers=WORKERS, pairs=REPRESENTATIVE, diskless=True)
    assert len(rows) == len(REPRESENTATIVE)
    assert_holds(rows, tmp_path / "sweep")
    # both targets' states were entered (the direct path by the default input)
    assert all(target_coverage(rows).values()), target_coverage(rows)
    # The faults took effect where the run passes the state.
    assert all(r["fault_applied"] for r in rows if r["state"] != "Register image"), table(rows, 0)


def test_cases_on_real_disks_hold(cdk_out: Path, tmp_path: Path) -> None:
    rows = sweep(cdk_out, tmp_path / "sweep", workers=2, pairs=ON_DISKS)
    assert len(rows) == len(ON_DISKS)
    assert_holds(rows, tmp_path / "sweep")
    # each case's input and target (none given: the default, snapshot)
    assert {(r["input"], r.get("target") or "snapshot") for r in rows} == {
        ("snapshot", "snapshot"),
        ("snapshot", "volume"),
        ("ami", "snapshot"),
    }
    assert all(r["fault_applied"] for r in rows), table(rows, 0)


def test_fault_lists_parse_and_validate() -> None:
    states = ["Check compaction", "Report", "Report with warnings"]
    both = parse("error@Report+throttle@Report with warnings", states)
    assert both == FaultList(
        (StateFault("error", "Report"), StateFault("throttle", "Report with warnings"))
    )
    assert str(both) == "error@Report+throttle@Report with warnings"
    # a single fault keeps its shape
    assert parse("error@Report", states) == StateFault("error", "Report")
    # throttle at several states: the emulator throttles each of them
    many = parse("throttle@Report+throttle@Check compaction", states)
    assert Faults.of(many).throttle_states == ("Report", "Check compaction")
    with pytest.raises(FaultError, match="Task states are"):
        parse("error@Report+error@Reprot", states)
    with pytest.raises(FaultError, match="given twice"):
        parse("error@Report+error@Report", states)
    with pytest.raises(FaultError, match="stand alone"):
        parse("error@Report+instance-lost", states)


def test_openers_are_derived_and_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    definition = {
        "StartAt": "Work",
        "States": {
            "Work": {"Type": "Task", "Next": "Done", "Catch": [
                {"ErrorEquals": ["InstanceLost"], "Next": "Lost path"},
                {"ErrorEquals": ["States.ALL"], "Next": "Failure"}]},
            "Done": {"Type": "Succeed"},
            "Failure": {"Type": "Pass", "Next": "Report failure"},
            "Report failure": {"Type": "Task", "End": True},
            "Lost path": {"Type": "Pass", "Next": "Teardown again"},
            "Teardown again": {"Type": "Task", "Next": "Work"},
        },
    }  # fmt: skip
    machine = Machine("", "arn", "m", definition)
    # the real table names states this definition lacks (a rename fails the same way)
    with pytest.raises(SystemExit, match="RECOVERY_OPENERS no longer fits"):
        openers(machine)
    monkeypatch.setattr("twin.sweep.RECOVERY_OPENERS", {"Failure": "error@Work"})
    # a recovery path with no opener in the table
    with pytest.raises(SystemExit, match=r"\['Teardown again'\] are only entered"):
        openers(machine)
    monkeypatch.setattr(
        "twin.sweep.RECOVERY_OPENERS", {"Failure": "error@Work", "Lost path": "lost@Work"}
    )
    assert openers(machine) == {"Report failure": "error@Work", "Teardown again": "lost@Work"}
    # an opener whose state does not catch into the path
    monkeypatch.setattr("twin.sweep.RECOVERY_OPENERS", {"Failure": "lost@Work"})
    with pytest.raises(SystemExit, match="no Catch of InstanceLost"):
        openers(machine)


def test_volume_only_states_come_from_the_target_choice() -> None:
    snapshot_rule = {"And": [{"Variable": "$.plan.target", "IsPresent": True},
                             {"Variable": "$.plan.target", "StringEquals": "snapshot"}],
                     "Next": "Direct"}  # fmt: skip
    definition = {
        "StartAt": "Copy",
        "States": {
            "Copy": {"Type": "Task", "Next": "Target is a snapshot?"},
            "Target is a snapshot?": {
                "Type": "Choice", "Choices": [snapshot_rule], "Default": "Create"
            },
            "Direct": {"Type": "Pass", "Next": "Check"},
            "Create": {
                "Type": "Task", "Next": "Check",
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Undo"}],
            },
            "Undo": {"Type": "Task", "End": True},
            "Check": {"Type": "Task", "End": True},
        },
    }  # fmt: skip
    assert volume_only_states(Machine("", "arn", "m", definition)) == ["Create", "Undo"]
    definition["States"]["Target is a snapshot?"]["Choices"] = [{"Variable": "$.x",
                                                                 "StringEquals": "snapshot",
                                                                 "Next": "Direct"}]  # fmt: skip
    with pytest.raises(SystemExit, match="no single rule"):
        volume_only_states(Machine("", "arn", "m", definition))


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


def test_the_sweep_table_has_a_cell_per_column_and_marks_a_broken_case() -> None:
    row = {"state": "Launch", "kind": "throttle", "input": "snapshot", "target": "volume",
           "execution_status": "FAILED", "error": "a|b", "fault_applied": True,
           "leaked_resources": 1, "holds": False}  # fmt: skip
    text = table([row], 60.0)
    *_, head, rule, line = text.splitlines()
    assert head.startswith("| state | kind |") and rule.count("---") == 15
    assert line == (
        "| Launch | throttle | - | snapshot, target volume | FAILED | a\\|b | - | True | 1 "
        "| 0/0 | - | None | None | - | **NO** |"
    )
