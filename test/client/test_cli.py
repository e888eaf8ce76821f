"""The CLI end to end against a fake Step Functions: arguments, --wait's lines, exit codes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from click.testing import CliRunner, Result
from client_fakes import (
    BATCH_MACHINE,
    EXECUTION,
    MACHINE,
    FakeSfn,
    FakeSsm,
    check_compaction,
    entered,
    error,
)
from client_fakes import progress as copy_progress
from ebs_compactor_client import api as api_module
from ebs_compactor_client import cli

SNAP = "snap-0123456789abcdef0"
PARAMETERS = {
    "/ebs-snapshot-compactor/Compactor/state-machine-arn": MACHINE,
    "/ebs-snapshot-compactor/Compactor/batch-state-machine-arn": BATCH_MACHINE,
}
REPORT = {"outcome": "success", "newSnapshotIds": ["snap-0fedcba9876543210"], "volumes": []}


@pytest.fixture
def sfn(monkeypatch: pytest.MonkeyPatch) -> FakeSfn:
    fake = FakeSfn()
    monkeypatch.setattr(
        api_module.Api, "create", classmethod(lambda cls, *a: cls(fake, FakeSsm(dict(PARAMETERS))))
    )
    monkeypatch.setattr(time, "sleep", lambda s: None)
    return fake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.cli, ["--stack", "Compactor", *args], catch_exceptions=False)


def succeeded(output: dict[str, Any]) -> tuple[str, list[Any], dict[str, Any]]:
    return ("SUCCEEDED", [{"type": "ExecutionSucceeded"}], {"output": json.dumps(output)})


def test_start_without_wait_starts_with_the_built_input(sfn: FakeSfn) -> None:
    result = run("start", "--snapshot", SNAP, "--jobs", "4", "--tag", "team=db", "--name", "n-1")
    assert result.exit_code == 0, result.output
    assert sfn.started == [
        {
            "stateMachineArn": MACHINE,
            "name": "n-1",
            "input": json.dumps({"snapshotId": SNAP, "jobs": 4, "tags": {"team": "db"}}),
        }
    ]
    assert f"started: {EXECUTION}" in result.output


def test_wait_prints_phases_and_copy_progress_and_exits_0(sfn: FakeSfn) -> None:
    sfn.steps = [
        ("RUNNING", [entered("Prepare phase"), entered("Prepare", "Task")], {}),
        (
            "RUNNING",
            [
                entered("Compaction phase"),
                check_compaction(copy_progress(10.0, 2**30, 10 * 2**30, 600)),
                check_compaction(copy_progress(55.5, 5 * 2**30, 10 * 2**30, 65)),
            ],
            {},
        ),
        succeeded(REPORT),
    ]
    result = run("start", "--snapshot", SNAP, "--wait", "--poll-seconds", "0.05")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "phase: Prepare" in lines and "phase: Compaction" in lines
    # events come in order even when a poll reads several pages (page size 2 here)
    assert lines.index("phase: Compaction") < lines.index(
        "copy: 55.5% 5.0 GiB of 10.0 GiB, about 1m05s left"
    )
    assert "copy: 10.0% 1.0 GiB of 10.0 GiB, about 10m00s left" not in lines  # same poll: latest
    assert lines[-1] == "SUCCEEDED outcome=success new snapshots: snap-0fedcba9876543210"


def test_wait_json_prints_the_report_alone_on_stdout(sfn: FakeSfn) -> None:
    sfn.steps = [succeeded(REPORT)]
    result = CliRunner().invoke(
        cli.cli, ["--stack", "Compactor", "start", "--snapshot", SNAP, "--wait", "--json"]
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout) == REPORT
    assert "SUCCEEDED" in result.stderr


@pytest.mark.parametrize(
    ("status", "extra", "code", "shown"),
    [
        (
            "FAILED",
            {"error": "InvalidInput", "cause": "snapshotId: bad"},
            1,
            "FAILED error=InvalidInput cause=snapshotId: bad",
        ),
        ("TIMED_OUT", {"error": "States.Timeout"}, 3, "TIMED_OUT error=States.Timeout"),
        ("ABORTED", {}, 4, "ABORTED error=-"),
        ("SUCCEEDED", {"output": json.dumps({"outcome": "failure"})}, 6, "outcome=failure"),
        ("SUCCEEDED", {"output": json.dumps({"outcome": "estimated"})}, 0, "outcome=estimated"),
        ("SUCCEEDED", {"output": json.dumps({"outcome": "success"})}, 0, "outcome=success"),
        (
            "SUCCEEDED",
            {"output": json.dumps({"outcome": "succeeded-with-warnings"})},
            8,
            "outcome=succeeded-with-warnings",
        ),
    ],
)
def test_exit_codes_and_error_names(
    sfn: FakeSfn, status: str, extra: dict[str, Any], code: int, shown: str
) -> None:
    sfn.steps = [(status, [], extra)]
    result = run("start", "--snapshot", SNAP, "--wait")
    assert result.exit_code == code, result.output
    assert shown in result.output.splitlines()[-1]


def test_bad_input_starts_nothing_and_exits_2(sfn: FakeSfn) -> None:
    for args in (
        ["--snapshot", "snap-nothex"],
        [],
        ["--snapshot", SNAP, "--image", "ami-0"],
        ["--snapshot", SNAP, "--jobs", "0"],
        ["--snapshot", SNAP, "--name", "a b"],
    ):
        result = run("start", *args)
        assert result.exit_code == 2, (args, result.output)
    assert sfn.started == []


def test_a_missing_stack_parameter_exits_5_saying_which(sfn: FakeSfn) -> None:
    result = CliRunner().invoke(cli.cli, ["--stack", "Nope", "start", "--snapshot", SNAP])
    assert result.exit_code == 5
    assert "/ebs-snapshot-compactor/Nope/state-machine-arn: ParameterNotFound" in result.output
    assert sfn.started == []


def test_state_machine_arn_needs_no_parameter(sfn: FakeSfn) -> None:
    result = CliRunner().invoke(
        cli.cli, ["start", "--snapshot", SNAP, "--state-machine-arn", "arn:x"]
    )
    assert result.exit_code == 0
    assert sfn.started[0]["stateMachineArn"] == "arn:x"


def test_throttled_polls_back_off_and_go_on(sfn: FakeSfn) -> None:
    sfn.steps = [succeeded(REPORT)]
    sfn.throttle_next = 2
    result = run("start", "--snapshot", SNAP, "--wait", "--poll-seconds", "1")
    assert result.exit_code == 0, result.output
    assert "throttled; polling every 2 s" in result.output
    assert "throttled; polling every 4 s" in result.output


def test_wait_timeout_exits_7(sfn: FakeSfn, monkeypatch: pytest.MonkeyPatch) -> None:
    sfn.steps = [("RUNNING", [], {})]
    ticks = iter(range(0, 10_000, 10))
    monkeypatch.setattr(time, "monotonic", lambda: next(ticks))
    result = run("start", "--snapshot", SNAP, "--wait", "--timeout", "25")
    assert result.exit_code == 7
    assert "still RUNNING after 25 s" in result.output


def test_batch_of_ids_uses_the_batch_state_machine_and_shows_counts(sfn: FakeSfn) -> None:
    sfn.map_counts = {"total": 2, "running": 1, "succeeded": 1, "failed": 0}
    map_run = {"type": "MapRunStarted", "mapRunStartedEventDetails": {"mapRunArn": "arn:map"}}
    summary = {"outcome": "partial", "totals": {"items": 2, "succeeded": 1, "failed": 1}}
    sfn.steps = [
        ("RUNNING", [entered("Compact each item", "Map"), map_run], {}),
        succeeded(summary),
    ]
    result = run(
        "batch",
        "--snapshot",
        SNAP,
        "--image",
        "ami-0123456789abcdef0",
        "--max-concurrency",
        "2",
        "--output-tag",
        "k=v",
        "--wait",
    )
    assert sfn.started[0]["stateMachineArn"] == BATCH_MACHINE
    assert json.loads(sfn.started[0]["input"]) == {
        "items": [{"snapshotId": SNAP}, {"imageId": "ami-0123456789abcdef0"}],
        "options": {"tags": {"k": "v"}},
        "maxConcurrency": 2,
    }
    assert "step: Compact each item" in result.output.splitlines()
    assert "items: 2 total, 1 running, 1 succeeded" in result.output
    assert result.output.splitlines()[-1] == (
        "SUCCEEDED outcome=partial items=2 succeeded=1 failed=1"
    )
    assert result.exit_code == 6  # a partial batch fails the pipeline


def test_batch_selector_flags(sfn: FakeSfn) -> None:
    result = run(
        "batch",
        "--tag",
        "env=prod",
        "--created-before",
        "2026-01-01T00:00:00Z",
        "--min-size-gib",
        "8",
        "--min-savings-percent",
        "20",
        "--include-compacted",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(sfn.started[0]["input"]) == {
        "selector": {
            "tag": {"key": "env", "value": "prod"},
            "createdBefore": "2026-01-01T00:00:00Z",
            "minSizeGiB": 8,
            "includeCompacted": True,
        },
        "minSavingsPercent": 20.0,
    }


def test_status_and_report(sfn: FakeSfn) -> None:
    sfn.steps = [succeeded(REPORT)]
    result = run("status", EXECUTION)
    assert result.exit_code == 0
    assert result.output.splitlines()[-1].startswith("SUCCEEDED outcome=success")
    result = run("report", EXECUTION)
    assert result.exit_code == 0
    assert json.loads(result.output) == REPORT


def test_report_of_a_failed_run_comes_from_its_report_state(sfn: FakeSfn) -> None:
    failed_report = {"outcome": "failure", "error": {"Error": "InvalidInput"}}
    exited = {
        "type": "TaskStateExited",
        "stateExitedEventDetails": {
            "name": "Report",
            "output": json.dumps({"report": failed_report}),
        },
    }
    sfn.steps = [("FAILED", [exited], {"error": "InvalidInput", "cause": "bad"})]
    result = run("report", EXECUTION)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == failed_report


def test_report_of_a_run_without_one_exits_5(sfn: FakeSfn) -> None:
    sfn.steps = [("RUNNING", [], {})]
    result = run("report", EXECUTION)
    assert result.exit_code == 5
    assert "has no report yet" in result.output


def test_aws_errors_exit_5(sfn: FakeSfn, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(**kwargs: Any) -> Any:
        raise error("AccessDeniedException", "StartExecution")

    monkeypatch.setattr(sfn, "start_execution", denied)
    result = run("start", "--snapshot", SNAP)
    assert result.exit_code == 5
    assert "states:StartExecution" in result.output and "AccessDeniedException" in result.output


def test_status_of_a_running_execution_shows_its_phase_and_copy(sfn: FakeSfn) -> None:
    events = [entered("Compaction phase"), check_compaction(copy_progress(12.0, 12, 100, 30))]
    sfn.steps = [("RUNNING", events, {})]
    result = run("status", EXECUTION)
    assert result.exit_code == 0
    assert result.output.splitlines()[1:] == [
        "phase: Compaction",
        "copy: 12.0% 12 B of 100 B, about 30s left",
        "RUNNING",
    ]


@pytest.mark.parametrize(("flags", "expected"), [([], None), (["--profile", "ops"], "ops")])
def test_a_profile_is_passed_only_when_given(
    sfn: FakeSfn, monkeypatch: pytest.MonkeyPatch, flags: list[str], expected: str | None
) -> None:
    """AWS_PROFILE is the SDK's to read: passed as profile_name it would outrank access keys in
    the environment, so the client would run as another identity than boto3 and the AWS CLI."""
    monkeypatch.setenv("AWS_PROFILE", "from-the-environment")
    profiles: list[str | None] = []
    fake = api_module.Api.create

    def create(cls: Any, region: str | None = None, profile: str | None = None) -> Any:
        profiles.append(profile)
        return fake(region, profile)

    monkeypatch.setattr(api_module.Api, "create", classmethod(create))
    result = CliRunner().invoke(
        cli.cli,
        [*flags, "--stack", "Compactor", "start", "--snapshot", SNAP],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert profiles == [expected]


def test_no_region_exits_5_with_the_sdks_message(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    result = CliRunner().invoke(
        cli.cli, ["start", "--state-machine-arn", "arn:x", "--snapshot", SNAP]
    )
    assert result.exit_code == 5, result.output
    assert "You must specify a region" in result.output


def test_ctrl_c_stops_the_wait_not_the_execution(
    sfn: FakeSfn, monkeypatch: pytest.MonkeyPatch
) -> None:
    sfn.steps = [("RUNNING", [], {})]

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupt)
    result = run("start", "--snapshot", SNAP, "--wait")
    assert result.exit_code == 130
    assert f"stopped waiting; the execution goes on: {EXECUTION}" in result.output
