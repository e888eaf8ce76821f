"""What --wait prints, from history events."""

from __future__ import annotations

import json

from client_fakes import check_compaction, entered
from client_fakes import progress as copy_progress
from ebs_compactor_client import progress as p


def test_phase_and_copy_lines_only_when_they_change() -> None:
    state = p.Progress()
    events = [
        entered("Prepare phase"),
        entered("Prepare", "Task"),
        entered("Compaction phase"),
        check_compaction(None),
        check_compaction(copy_progress(42.0, 3 * 2**30, 7 * 2**30, 190)),
        check_compaction(copy_progress(42.0, 3 * 2**30, 7 * 2**30, 190)),
        entered("Compaction phase"),
    ]
    events = [{**e, "id": i + 1} for i, e in enumerate(events)]
    assert state.apply(events) == [
        "phase: Prepare",
        "phase: Compaction",
        "copy: 42.0% 3.0 GiB of 7.0 GiB, about 3m10s left",
    ]
    assert state.last_event_id == len(events)
    assert state.phase == "Compaction"


def test_copy_line_without_eta_or_total() -> None:
    assert p.format_copy({"phase": "trim", "percent": 5}) == "trim: 5.0%"
    line = p.format_copy(
        {"percent": 99.95, "bytesDone": 512, "bytesTotal": 1024, "etaSeconds": None}
    )
    assert line == "copy: 100.0% 512 B of 1.0 KiB"


def test_progress_from_a_state_output() -> None:
    assert p.compaction_progress(None) is None
    assert p.compaction_progress("not json") is None
    assert p.compaction_progress(json.dumps({"compaction": {"done": True}})) is None
    assert p.compaction_progress(json.dumps({"compaction": {"progress": {"percent": 1}}})) == {
        "percent": 1
    }


def test_durations_and_sizes() -> None:
    assert p.format_duration(0) == "0s"
    assert p.format_duration(59.6) == "1m00s"
    assert p.format_duration(3725) == "1h02m"
    assert p.format_bytes(1536) == "1.5 KiB"
    assert p.format_bytes(5 * 2**40) == "5.0 TiB"


def test_batch_counts_line() -> None:
    state = p.Progress()
    counts = {
        "total": 3,
        "pending": 0,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "timedOut": 0,
        "aborted": 0,
        "resultsWritten": 0,
    }
    assert state.counts_line(counts) == "items: 3 total, 1 running, 1 succeeded, 1 failed"
    assert state.counts_line(counts) is None
    events = [
        {"id": 1, "type": "MapRunStarted", "mapRunStartedEventDetails": {"mapRunArn": "arn:map"}}
    ]
    state.apply(events)
    assert state.map_run_arn == "arn:map"


def test_summary_lines() -> None:
    report = {"outcome": "success", "newSnapshotIds": ["snap-1", "snap-2"]}
    assert p.summary_line("SUCCEEDED", report, None, None) == (
        "SUCCEEDED outcome=success new snapshots: snap-1, snap-2"
    )
    summary = {"outcome": "partial", "totals": {"items": 3, "failed": 1}}
    assert p.summary_line("SUCCEEDED", summary, None, None) == (
        "SUCCEEDED outcome=partial items=3 failed=1"
    )
    cause = json.dumps({"errorMessage": "snapshot snap-1 does not exist", "errorType": "X"})
    assert p.summary_line("FAILED", None, "SnapshotNotFound", cause) == (
        "FAILED error=SnapshotNotFound cause=snapshot snap-1 does not exist"
    )
    assert p.summary_line("ABORTED", None, None, None) == "ABORTED error=- cause=-"
