"""--wait and status follow the launch attempt: a child execution with its own history, named by
the workflow's `Run attempt` TaskSubmitted (recorded event lists, a fake Step Functions)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from client_fakes import (
    EXECUTION,
    FakeExecutions,
    attempt_arn,
    check_compaction,
    entered,
    submitted,
)
from client_fakes import progress as copy_progress
from ebs_compactor_client import api as api_module
from ebs_compactor_client import cli
from ebs_compactor_client.api import UNREADABLE_POLLS, Api, ClientFailure, Waiter
from ebs_compactor_client.progress import Progress

A1, A2 = attempt_arn(1), attempt_arn(2)
COPY = copy_progress(42.0, 3 * 2**30, 7 * 2**30, 190)
COPY_LINE = "copy: 42.0% 3.0 GiB of 7.0 GiB, about 3m10s left"


def wait(fake: FakeExecutions) -> list[str]:
    lines: list[str] = []
    Waiter(Api(fake, None), EXECUTION, interval=0, out=lines.append, sleep=lambda s: None).wait()
    return lines


def test_parent_only_reads_the_workflows_history_alone() -> None:
    fake = FakeExecutions(
        [
            ("RUNNING", {EXECUTION: [entered("Prepare phase")]}),
            ("SUCCEEDED", {EXECUTION: [entered("Report phase")]}),
        ]
    )
    assert wait(fake) == ["phase: Prepare", "phase: Report"]
    assert set(fake.reads) == {EXECUTION}


def test_the_attempts_phases_and_copy_come_from_its_own_history() -> None:
    fake = FakeExecutions(
        [
            (
                "RUNNING",
                {
                    EXECUTION: [
                        entered("Prepare phase"),
                        entered("Run attempt", "Task"),
                        submitted(A1),
                    ]
                },
            ),
            ("RUNNING", {A1: [entered("Launch phase"), entered("Compaction phase")]}),
            ("RUNNING", {A1: [check_compaction(None), check_compaction(COPY)]}),
            ("SUCCEEDED", {EXECUTION: [entered("Report phase")]}),
        ]
    )
    assert wait(fake) == [
        "phase: Prepare",
        "phase: Launch",
        "phase: Compaction",
        COPY_LINE,
        "phase: Report",
    ]


def test_a_relaunch_is_followed_to_the_newest_attempt() -> None:
    fake = FakeExecutions(
        [
            ("RUNNING", {EXECUTION: [submitted(A1)], A1: [entered("Launch phase")]}),
            # the first attempt's end and the second's start come within one poll
            (
                "RUNNING",
                {
                    A1: [entered("Instance lost: teardown phase")],
                    EXECUTION: [entered("Relaunch"), submitted(A2)],
                },
            ),
            (
                "RUNNING",
                {
                    A2: [
                        entered("Launch phase"),
                        entered("Compaction phase"),
                        check_compaction(COPY),
                    ]
                },
            ),
            ("SUCCEEDED", {}),
        ]
    )
    assert wait(fake) == [
        "phase: Launch",
        "phase: Instance lost: teardown",
        "phase: Launch",
        "phase: Compaction",
        COPY_LINE,
    ]
    last_a1 = max(i for i, arn in enumerate(fake.reads) if arn == A1)
    assert fake.reads.index(A2) < last_a1 + 2, "the old attempt is read once more, then no more"
    assert fake.reads[last_a1 + 1 :].count(A1) == 0


def test_an_attempt_not_readable_yet_is_read_again_at_the_next_poll() -> None:
    fake = FakeExecutions(
        [
            ("RUNNING", {EXECUTION: [submitted(A1)], A1: [entered("Launch phase")]}),
            ("RUNNING", {}),
            ("RUNNING", {A1: [check_compaction(COPY)]}),
            ("SUCCEEDED", {}),
        ],
        unreadable={A1: ["ExecutionDoesNotExist", "AccessDeniedException"]},
    )
    assert wait(fake) == ["phase: Launch", COPY_LINE]
    assert fake.reads.count(A1) == 4


def test_an_attempt_never_readable_is_said_once_and_the_wait_goes_on() -> None:
    polls = UNREADABLE_POLLS + 3
    fake = FakeExecutions(
        [("RUNNING", {EXECUTION: [submitted(A1)]})]
        + [("RUNNING", {})] * (polls - 2)
        + [("SUCCEEDED", {EXECUTION: [entered("Report phase")]})],
        unreadable={A1: ["AccessDeniedException"] * polls},
    )
    lines = wait(fake)
    assert lines[-1] == "phase: Report"
    (said,) = [line for line in lines if "not readable" in line]
    assert "AccessDeniedException" in said and "states:GetExecutionHistory" in said and A1 in said


def test_another_error_of_the_attempts_history_fails_the_wait() -> None:
    fake = FakeExecutions(
        [("RUNNING", {EXECUTION: [submitted(A1)]}), ("SUCCEEDED", {})],
        unreadable={A1: ["InvalidArn"]},
    )
    with pytest.raises(ClientFailure, match="InvalidArn"):
        wait(fake)


def test_only_a_startexecution_tasks_submission_names_an_attempt() -> None:
    progress = Progress()
    progress.apply([{**submitted(A1, resource_type="lambda"), "id": 1}])
    assert progress.attempt_arn is None
    progress.apply([{**submitted(A1), "id": 2}])
    assert progress.attempt_arn == A1


def test_status_shows_the_running_attempts_phase_and_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeExecutions(
        [
            (
                "RUNNING",
                {
                    EXECUTION: [entered("Prepare phase"), submitted(A1)],
                    A1: [entered("Compaction phase"), check_compaction(COPY)],
                },
            )
        ]
    )
    monkeypatch.setattr(api_module.Api, "create", classmethod(lambda cls, *a: cls(fake, None)))
    result = CliRunner().invoke(cli.cli, ["status", EXECUTION], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1:] == ["phase: Compaction", COPY_LINE, "RUNNING"]
