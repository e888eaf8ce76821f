"""`target: "snapshot"` end to end on the twin (issue #11): the workflow starts each new snapshot
with StartSnapshot, the transfer instance puts the blocks the copy keeps into it with the EBS
direct APIs (as the instance role: the command's environment credentials, judged by the IAM
check) and completes it; no target volume, no CreateSnapshot. And what goes wrong: puts corrupted
in transit never complete a snapshot, throttled puts ride through, a failure after StartSnapshot
leaves nothing (teardown deletes the pending snapshot, or, when EC2 refuses that, leaves it to
time out and the sweeper removes it). `target: "volume"` (today's path) still works.

The AMI runs on real disks; the rest diskless (the data plane replayed from its recording): the
demo's runs of both targets (test_scenarios.py) copy real disks too.

Each test runs the scenario's own steps (twin/scenario.py) with the emulator kept open, so it can
look at what the emulator served and recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from twin import later, limits
from twin.checks import check
from twin.context import Context, setup
from twin.emulator.blockstore import written_chunks
from twin.emulator.faults import PUTS_THROTTLED, Faults, parse
from twin.emulator.server import Emulator
from twin.facts import facts
from twin.iam import check as iam_check
from twin.iam.recorder import INSTANCE_CALLER
from twin.options import Options
from twin.recording import drift
from twin.report import build
from twin.runs import cleanup_path
from twin.scenario import _play
from twin.starts import start_api

INSTANCE_ACTIONS = {"ebs:PutSnapshotBlock", "ebs:CompleteSnapshot"}


@contextmanager
def deployed(cdk_out: Path, tmp_path: Path, **options: Any) -> Iterator[Context]:
    """Diskless unless `diskless=False`: the faults of EBS and of the control plane do not need
    real disks; an AMI's direct write does (test_snapshot_target_compacts_an_ami)."""
    options.setdefault("diskless", True)
    opts = Options(cdk_out=cdk_out, out_dir=tmp_path / "out", picture=False, **options)
    opts.validate()
    fault = parse(opts.fault)
    with Emulator(tmp_path / "emu", Faults.of(fault), diskless=opts.diskless) as emu:
        yield setup(emu, opts, fault, tmp_path / "work", tmp_path / "logs")


def scenario(ctx: Context) -> dict[str, Any]:
    """The scenario's run, checks and report (as make demo writes it), the emulator still open."""
    started = time.monotonic()
    ran = _play(ctx)
    return build(ctx, ran, check(ctx, ran), started).as_dict()


def instance_calls(emu: Emulator) -> set[str]:
    return {
        f"{c['service']}:{c['action']}"
        for c in iam_check.load_calls(emu.calls_path)
        if c["caller"] == INSTANCE_CALLER
    }


def assert_written_directly(ctx: Context, report: dict[str, Any]) -> None:
    """Succeeded through the direct path; files verified; each new snapshot a direct one that
    holds blocks; nothing leaked; every call (the instance's too) allowed."""
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    assert report["target"] == "snapshot", report["workflow_report"]
    assert {"Target is a snapshot?", "Direct snapshots"} <= set(report["states_visited"])
    assert "Create snapshots" not in report["states_visited"]
    assert "create_snapshots" not in report["handlers_called"]
    assert report["files_verified"] is True and report["fsck_clean"] is True, report["verification"]
    assert report["leaked_resources"] == 0, report["leaks"]
    assert report["iam_denials"] == [] and report["holds"] is True
    emu = ctx.emu
    new_ids = [v["newSnapshotId"] for v in report["verification"]]
    assert len(new_ids) == len(report["source_snapshot_ids"])
    assert set(new_ids) <= set(emu.state.direct.started)
    assert report["snapshots_created"] == len(new_ids)  # no CreateSnapshot besides
    # which blocks each holds (held ∩ needed, zeros included: issue #19) is the twin's own check
    # (twin/needed.py), part of `holds`
    for sid in new_ids:
        assert written_chunks(emu.snapshot_file(sid)), sid
    assert report["direct_writes"]["puts_accepted"] >= report["new_snapshot_chunks"]
    assert 0 < report["new_snapshot_chunks"] < report["source_snapshot_chunks"]
    # the instance's own calls were recorded as the instance role and checked
    assert instance_calls(emu) >= INSTANCE_ACTIONS


def test_snapshot_target_compacts_a_snapshot(cdk_out: Path, tmp_path: Path) -> None:
    """The default input (no `target`): the direct path."""
    with deployed(cdk_out, tmp_path) as ctx:
        report = scenario(ctx)
        assert "target" not in report["execution_input"]
        assert_written_directly(ctx, report)
        summary = [v for v in (report["workflow_report"] or {}).get("volumes") or []]
        assert summary and all(v.get("targetSnapshotId") for v in summary), summary
        # the check can fail: without ebs:PutSnapshotBlock the instance role is denied
        denied = iam_check.check_calls(
            ctx.emu.calls_path, ctx.d, cdk_out=cdk_out,
            edit_policies=iam_check.without_action("ebs:PutSnapshotBlock"),
        )  # fmt: skip
        assert (INSTANCE_CALLER, "ebs:PutSnapshotBlock") in {(d.caller, d.action) for d in denied}
        # StartSnapshot's Tags are authorized as ec2:CreateTags too: without it, start_compaction
        # is denied
        (starter,) = [f.name for f in ctx.d.functions.values() if ".start_compaction." in f.handler]
        denied = iam_check.check_calls(
            ctx.emu.calls_path, ctx.d, cdk_out=cdk_out,
            edit_policies=iam_check.without_action("ec2:CreateTags"),
        )  # fmt: skip
        assert any(
            (d.caller, d.call, d.action) == (starter, "ebs:StartSnapshot", "ec2:CreateTags")
            for d in denied
        ), denied


def test_snapshot_target_compacts_an_ami(cdk_out: Path, tmp_path: Path) -> None:
    with deployed(cdk_out, tmp_path, input="ami", target="snapshot", diskless=False) as ctx:
        report = scenario(ctx)
        assert report["execution_input"]["target"] == "snapshot"
        assert_written_directly(ctx, report)
        image = report["image"]
        assert image["attributes_equal"] is True, image
        assert report["new_image_existing"] is True
        mapped = {f["snapshotId"] for f in image["fsr"]}
        assert mapped and mapped <= set(ctx.emu.state.direct.started), image
        # what the diskless twin replays is still what the data plane prints (test_diskless.py)
        assert drift(tmp_path / "logs", "ami", "snapshot") == []


def test_volume_target_still_compacts_through_create_snapshot(cdk_out, tmp_path) -> None:
    with deployed(cdk_out, tmp_path, target="volume") as ctx:
        report = scenario(ctx)
        assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
        assert report["target"] == "volume"
        assert "Create snapshots" in report["states_visited"]
        assert "Direct snapshots" not in report["states_visited"]
        assert report["files_verified"] is True and report["holds"] is True, report["leaks"]
        assert ctx.emu.state.direct.started == []
        assert not instance_calls(ctx.emu) & INSTANCE_ACTIONS


def test_corrupted_puts_never_complete_a_snapshot(cdk_out: Path, tmp_path: Path) -> None:
    with deployed(cdk_out, tmp_path, fault="put-corrupted") as ctx:
        report = scenario(ctx)
        assert report["execution_status"] == "FAILED"
        assert report["error"] == "CompactionFailed", report["cause"]
        assert "NOT completed" in str(report["cause"]), report["cause"]
        direct = report["direct_writes"]
        assert direct["snapshots_started"] >= 1 and direct["puts_corrupted"] > 0
        assert direct["puts_accepted"] == 0
        # the instance never asked to complete one
        assert "ebs:PutSnapshotBlock" in instance_calls(ctx.emu)
        assert "ebs:CompleteSnapshot" not in instance_calls(ctx.emu)
        assert report["leaked_resources"] == 0 and report["holds"] is True, report["leaks"]
        assert report["new_snapshots_existing"] == 0


def test_throttled_puts_ride_through(cdk_out: Path, tmp_path: Path) -> None:
    with deployed(cdk_out, tmp_path, fault="put-throttled") as ctx:
        report = scenario(ctx)
        assert_written_directly(ctx, report)
        direct = report["direct_writes"]
        assert direct["puts_throttled"] == PUTS_THROTTLED
        assert direct["puts_concurrent_limit"] > 0, direct  # 16 jobs, 2 served at once


def test_failure_after_start_snapshot_deletes_the_pending_snapshot(cdk_out, tmp_path) -> None:
    with deployed(cdk_out, tmp_path, fault="command-fails") as ctx:
        report = scenario(ctx)
        assert report["execution_status"] == "FAILED"
        assert report["error"] == "CompactionFailed", report["cause"]
        (started,) = ctx.emu.state.direct.started
        assert started not in ctx.emu.ec2.snapshots  # teardown deleted it while pending
        assert report["direct_writes"]["pending_deletes_refused"] == 0
        assert report["leaked_resources"] == 0 and report["holds"] is True, report["leaks"]


def test_a_refused_pending_delete_is_left_to_time_out_then_swept(cdk_out, tmp_path) -> None:
    with deployed(cdk_out, tmp_path, fault="pending-delete-refused") as ctx:
        emu = ctx.emu
        result = start_api(ctx)
        cleanup_path(ctx, result)
        assert result.status == "FAILED" and result.error == "CompactionFailed", result.cause
        (started,) = emu.state.direct.started
        assert emu.state.direct.deletes_refused >= 1
        # teardown did not wait for it: it left it to time out ($.teardown.leftToTimeOut), and the
        # failure report's notes say so
        notes = (result.workflow_report or {}).get("notes") or []
        assert any(started in n and "refused" in n for n in notes), notes
        left = facts(emu, result, None).leaks
        assert left == [f"snapshot {started}"], left
        assert emu.ec2.snapshots[started].status == "pending"
        # its Timeout later it is `error`; the sweeper (past its grace period) deletes it
        minutes = later.minutes_until_swept(later.sweep_function(ctx.d))
        assert minutes > limits.limit("directSnapshotTimeoutMinutes")
        runs = later.sweep_later(emu, ctx.d, minutes)
        removed = [r["id"] for run in runs for e in run["executions"] for r in e["removed"]]
        assert started in removed, runs
        assert facts(emu, result, None).leaks == []
        denials = iam_check.check_calls(
            emu.calls_path,
            ctx.d,
            cdk_out=cdk_out,
            usage_from="a direct snapshot swept after its Timeout",
        )
        assert denials == [], "\n".join(map(str, denials))


def test_the_pending_delete_refused_scenario_holds(cdk_out: Path, tmp_path: Path) -> None:
    """make demo FAULT=pending-delete-refused: the same, with the sweeper's later runs in the
    report, and nothing leaked at the end."""
    with deployed(cdk_out, tmp_path, fault="pending-delete-refused") as ctx:
        report = scenario(ctx)
        assert report["execution_status"] == "FAILED"
        assert report["swept_later"], report["notes"]
        assert report["direct_writes"]["pending_deletes_refused"] >= 1
        assert report["leaked_resources"] == 0 and report["holds"] is True, report["leaks"]


@pytest.mark.parametrize("target", ["tag", "batch"])
def test_volume_target_needs_an_api_start(target: str) -> None:
    extra = {"trigger": "tag"} if target == "tag" else {"batch": 2}
    with pytest.raises(ValueError, match="TARGET=volume"):
        Options(target="volume", **extra).validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TARGET=disk"):
        Options(target="disk").validate()
