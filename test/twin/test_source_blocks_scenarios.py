"""The source-blocks path end to end on the twin: the list_source_blocks Lambda lists the source
snapshot through the emulator's EBS direct API, the bundle goes through moto's S3, the "instance"
fetches it with curl from a presigned URL and copies only listed blocks; teardown leaves no
object; throttling at the listing state is survived like any throttle."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import twin.context as context_module
from twin import demo
from twin.iam.check import load_calls
from twin.scenario import Options, run

LIST_STATE = "List source blocks"


def scenario(cdk_out: Path, tmp_path: Path, **options: Any) -> dict[str, Any]:
    report = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "out", picture=False, **options))
    assert report["leaked_objects"] == 0, report["leaks"]
    assert report["leaked_resources"] == 0, report["leaks"]
    assert report["source_snapshot_unchanged"] is True
    assert report["iam_denials"] == [], report["iam_denials"]
    assert report["holds"] is True, report
    return report


def _volumes(report: dict[str, Any]) -> list[dict[str, Any]]:
    return list((report["workflow_report"] or {}).get("volumes") or [])


def _held_as_listed(report: dict[str, Any]) -> None:
    """The held blocks the workflow reports are the blocks of the source's sparse file (what the
    emulator's ListSnapshotBlocks lists), and the copy read no more of them than there are."""
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    (volume,) = _volumes(report)
    assert volume["blockListError"] is None
    assert volume["heldBlocks"] == report["source_snapshot_chunks"]
    assert 0 < volume["heldBlocksRead"] <= volume["heldBlocks"]
    assert report["files_verified"] is True and report["fsck_clean"] is True


def test_the_listed_blocks_reach_the_copy(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path)
    assert LIST_STATE in report["states_visited"]
    _held_as_listed(report)
    (volume,) = _volumes(report)
    shown = f"volume 0: {volume['heldBlocks']} blocks held (ListSnapshotBlocks), "
    assert shown + f"{volume['heldBlocksRead']} of them read" in demo.summary(report)


def test_throttled_listing_is_retried(cdk_out: Path, tmp_path: Path) -> None:
    report = scenario(cdk_out, tmp_path, fault=f"throttle@{LIST_STATE}", diskless=True)
    assert report["fault_applied"]["applied"] is True, report["fault_applied"]
    assert report["throttled_requests"] == {LIST_STATE: 8}
    _held_as_listed(report)


def test_an_abort_after_listing_leaves_no_object(
    cdk_out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle exists when the run is aborted; the cleanup workflow's teardown deletes it."""
    kept = tmp_path / "calls.jsonl"
    real_deploy = context_module.deploy

    def deploy(emu: Any, out: Path) -> Any:
        deployment = real_deploy(emu, out)
        shutil.copy(emu.calls_path, kept)  # the run deletes its work directory: keep the calls
        emu.iam_recorder.path = kept
        return deployment

    monkeypatch.setattr(context_module, "deploy", deploy)
    report = scenario(cdk_out, tmp_path, fault="abort@Attach volumes", diskless=True)
    assert report["execution_status"] == "ABORTED"
    assert report["cleanup"] == "SUCCEEDED", report["cleanup_runs"]
    s3 = [(c["action"], c["params"]) for c in load_calls(kept) if c["service"] == "s3"]
    bundle = f"{report['execution_name']}/source-blocks.tar.gz"
    put = [i for i, (a, p) in enumerate(s3) if a == "PutObject" and p.get("Key") == bundle]
    deleted = [
        i
        for i, (a, p) in enumerate(s3)
        if (a == "DeleteObject" and p.get("Key") == bundle)
        or (a == "DeleteObjects" and bundle in p.get("Keys", []))
    ]
    assert put and deleted and put[0] < deleted[-1], s3
