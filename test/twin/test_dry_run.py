"""`make demo DRY_RUN=1` (docs/workflow.md, "Dry run"): the execution input says `"dryRun": true`;
the run inspects the source, makes no target, snapshot or AMI, leaves nothing, and its prediction
matches what a real compaction of the same source stores.

Runs against the cloud assembly in TWIN_CDK_OUT (or a synth of this checkout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twin.emulator.blockstore import EBS_BLOCK
from twin.scenario import Options, run

NO_OUTPUT_STATES = {"Create snapshots", "Check snapshots", "Delivered", "Register image"}


def dry_run(cdk_out: Path, tmp_path: Path, **options: Any) -> dict[str, Any]:
    report = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "dry", dry_run=True, **options))
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    assert (report["dry_run"], report["outcome"], report["delivered"]) == (True, "estimated", False)
    assert report["execution_input"]["dryRun"] is True
    # nothing made, nothing left, the source as it was
    assert report["snapshots_created"] == 0
    assert report["new_snapshot_ids"] == [] and report["new_image_id"] is None
    assert report["leaked_resources"] == 0, report["leaks"]
    assert report["source_snapshot_unchanged"] is True
    assert report["iam_denials"] == []
    assert report["holds"] is True
    assert not NO_OUTPUT_STATES & set(report["states_visited"])
    assert {"Dry run?", "Estimated", "Dry run teardown", "Dry run report"} <= set(
        report["states_visited"]
    )
    assert "create_snapshots" not in report["handlers_called"]
    workflow = report["workflow_report"]
    assert workflow["newSnapshotIds"] == [] and workflow["dryRun"] is True
    assert report["estimate"] == workflow["estimate"]
    assert report["predicted_stored_bytes"] == workflow["estimate"]["predictedStoredBytes"]
    return report


def test_a_dry_run_predicts_what_the_compaction_of_the_same_source_stores(
    cdk_out: Path, tmp_path: Path
) -> None:
    estimated = dry_run(cdk_out, tmp_path)
    (volume,) = estimated["workflow_report"]["volumes"]
    estimate = estimated["estimate"]
    # the source's held blocks are what it stores
    assert estimate["sourceStoredBytes"] == volume["heldBlocks"] * EBS_BLOCK
    assert estimate["sourceStoredBytes"] == estimated["source_snapshot_bytes"]
    assert 0 < estimate["predictedStoredBytes"] < estimate["sourceStoredBytes"]
    assert 0 < estimate["savingsPercent"] < 100
    assert estimate["copySeconds"] >= 1

    real = run(Options(cdk_out=cdk_out, out_dir=tmp_path / "real"))
    assert real["execution_status"] == "SUCCEEDED", (real["error"], real["cause"])
    assert real["source_snapshot_chunks"] == estimated["source_snapshot_chunks"], (
        "not the same source"
    )
    stored = real["new_snapshot_bytes"]
    print(f"predicted {estimate['predictedStoredBytes']} bytes, the compaction stored {stored}")
    # an upper bound (all-zero data is not written), and on this disk an exact one
    assert stored <= estimate["predictedStoredBytes"] <= stored * 1.05
    assert stored == (real["workflow_report"]["volumes"][0]["writtenBlocks"] * EBS_BLOCK)


def test_a_dry_run_of_an_ami_estimates_each_volume_and_registers_nothing(
    cdk_out: Path, tmp_path: Path
) -> None:
    report = dry_run(cdk_out, tmp_path, input="ami")
    volumes = report["workflow_report"]["volumes"]
    assert len(volumes) >= 2
    assert all(v["estimate"] is not None for v in volumes)
    total = report["estimate"]
    assert total["volumes"] == len(volumes)
    assert total["predictedStoredBytes"] == sum(
        v["estimate"]["predictedStoredBytes"] for v in volumes
    )
    assert report["workflow_report"]["imageId"] is None


@pytest.mark.parametrize(
    "options",
    [{"trigger": "tag"}, {"batch": 2}, {"os": "debian", "input": "ami"}],
)
def test_a_dry_run_is_one_execution_started_through_the_api(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="DRY_RUN=1 starts one dry run through the API"):
        Options(dry_run=True, **options).validate()
