"""The IAM usage proof's merge (twin/iam/usage.py) on synthetic parts: what pytest-xdist's workers
write, merged after the suite, fails on a statement no run used (naming role and statement) and on
any denial, and not on a statement only a service or an unmodelled path uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from twin.iam import usage

LAUNCH, TEARDOWN = "TaskRolesLaunchAAAA1111", "TaskRolesTeardownBBBB2222"


def _roles() -> dict[str, list[dict[str, Any]]]:
    """Two roles as check.py's policy entries: inline, a CDK default policy, an AWS managed one."""

    def allow(sid: str | None, *actions: str) -> dict[str, Any]:
        statement = {"Effect": "Allow", "Action": list(actions), "Resource": "*"}
        return statement if sid is None else {"Sid": sid, **statement}

    return {
        LAUNCH: [
            {"name": "Task", "policy": {"Statement": [
                allow("RunSpotInstances", "ec2:RunInstances"),
                allow("CreateTheSpotServiceLinkedRole", "iam:CreateServiceLinkedRole"),
            ]}},
            {"name": "LaunchDefaultPolicy1234ABCD", "policy": {"Statement": [
                allow(None, "xray:PutTraceSegments", "xray:PutTelemetryRecords"),
                allow("WriteOwnLogs", "logs:CreateLogStream", "logs:PutLogEvents"),
            ]}},
            {"name": "arn:aws:iam::aws:policy/ReadOnlyAccess", "managed": "ReadOnlyAccess"},
        ],
        TEARDOWN: [
            {"name": "Task", "policy": {"Statement": [
                {"Sid": "NeverDeleteDeliveredOutputs", "Effect": "Deny",
                 "Action": "ec2:DeleteSnapshot", "Resource": "*"},
                allow("RemoveOnlyTheStacksResources", "ec2:DeleteVolume", "ec2:DeleteSnapshot"),
                allow("Describe", "ec2:DescribeVolumes"),
            ]}},
        ],
    }  # fmt: skip


@pytest.fixture
def not_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exemptions these roles have (the real table names the stack's statements)."""
    monkeypatch.setattr(
        usage,
        "NOT_CALLED",
        {
            "CreateTheSpotServiceLinkedRole": "an account's first Spot launch",
            "WriteOwnLogs": "Lambda",
        },
    )


def _write_parts(directory: Path, monkeypatch: pytest.MonkeyPatch, *runs: Any) -> None:
    """Each run as a worker of its own records it (TWIN_IAM_USAGE/<pid>.jsonl)."""
    monkeypatch.setenv(usage.USAGE_DIR_ENV, str(directory))
    for pid, (name, used, denials) in enumerate(runs, start=100):
        monkeypatch.setattr(usage.os, "getpid", lambda pid=pid: pid)
        usage.record(usage.part(name, _roles(), used, denials))


def test_the_workers_parts_merge_and_a_statement_no_run_used_fails_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_called: None
) -> None:
    parts = tmp_path / "parts"
    _write_parts(
        parts, monkeypatch,
        ("happy", {LAUNCH: {"Task/RunSpotInstances": 2}, TEARDOWN: {"Task/Describe": 3}}, []),
        ("abort", {TEARDOWN: {"Task/Describe": 1}}, []),
    )  # fmt: skip
    assert sorted(p.name for p in parts.iterdir()) == ["100.jsonl", "101.jsonl"]
    report = usage.merge(usage.read_parts(parts))
    assert report["runs"] == 2
    described = report["roles"][TEARDOWN]["statements"]["Task/Describe"]
    assert (described["calls"], described["runs"]) == (4, ["happy", "abort"])
    assert report["unused"] == [
        f"{TEARDOWN}: statement Task/RemoveOnlyTheStacksResources "
        "(ec2:DeleteVolume, ec2:DeleteSnapshot)"
    ]
    # a Deny is a guard, a service's statement and an exempted one are listed apart, not unused
    assert sorted(report["notCalled"]) == [
        f"{LAUNCH}: LaunchDefaultPolicy1234ABCD/#0",
        f"{LAUNCH}: LaunchDefaultPolicy1234ABCD/WriteOwnLogs",
        f"{LAUNCH}: Task/CreateTheSpotServiceLinkedRole",
    ]
    assert usage.failures(report) == [f"unused: {report['unused'][0]}"]
    # the AWS managed policy is not the stack's: not in the inventory
    assert not any(s.startswith("arn:") for s in report["roles"][LAUNCH]["statements"])

    written = tmp_path / "iam-report.json"
    assert usage.main([str(parts), "--report", str(written)]) == 1
    assert json.loads(written.read_text())["unused"] == report["unused"]


def test_every_statement_used_passes_and_a_denial_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_called: None
) -> None:
    every = {
        LAUNCH: {"Task/RunSpotInstances": 1},
        TEARDOWN: {"Task/Describe": 1, "Task/RemoveOnlyTheStacksResources": 1},
    }
    _write_parts(tmp_path / "ok", monkeypatch, ("happy", every, []))
    assert usage.main([str(tmp_path / "ok"), "--report", str(tmp_path / "ok.json")]) == 0

    denial = "launch: ec2:RunInstances on arn:aws:ec2:us-east-1:1:instance/*: ImplicitlyDenied"
    _write_parts(tmp_path / "denied", monkeypatch, ("fault", every, [denial]))
    report = usage.merge(usage.read_parts(tmp_path / "denied"))
    assert usage.failures(report) == [f"denied: fault: {denial}"]


def test_no_recorded_run_and_a_stale_exemption_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_called: None
) -> None:
    (tmp_path / "empty").mkdir()
    empty = usage.merge(usage.read_parts(tmp_path / "empty"))
    assert usage.failures(empty) == [
        "no twin run recorded its IAM usage: was TWIN_IAM_USAGE set for the suite?"
    ]
    monkeypatch.setitem(usage.NOT_CALLED, "RemovedLongAgo", "no role has it")
    every = {LAUNCH: {"Task/RunSpotInstances": 1}, TEARDOWN: {"Task/Describe": 1,
             "Task/RemoveOnlyTheStacksResources": 1}}  # fmt: skip
    _write_parts(tmp_path / "parts", monkeypatch, ("happy", every, []))
    report = usage.merge(usage.read_parts(tmp_path / "parts"))
    assert usage.failures(report) == [
        "NOT_CALLED names RemovedLongAgo, which no role has: remove it"
    ]


def test_without_the_variable_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(usage.USAGE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    usage.record(usage.part("run", _roles(), {}, []))
    assert list(tmp_path.iterdir()) == []


def test_an_exemption_for_one_role_leaves_the_others_proven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOT_CALLED's "<role>:<Sid>" exempts that role's statement only."""
    monkeypatch.setattr(
        usage,
        "NOT_CALLED",
        {"TaskRolesTeardown:RemoveOnlyTheStacksResources": "a path the twin does not run"},
    )
    roles = _roles()
    roles[LAUNCH][0]["policy"]["Statement"].append(
        {"Sid": "RemoveOnlyTheStacksResources", "Effect": "Allow", "Action": "ec2:DeleteVolume",
         "Resource": "*"}
    )  # fmt: skip
    monkeypatch.setenv(usage.USAGE_DIR_ENV, str(tmp_path))
    usage.record(usage.part("happy", roles, {LAUNCH: {"Task/RunSpotInstances": 1}}, []))
    report = usage.merge(usage.read_parts(tmp_path))
    assert f"{TEARDOWN}: Task/RemoveOnlyTheStacksResources" in report["notCalled"]
    assert (
        f"{LAUNCH}: statement Task/RemoveOnlyTheStacksResources (ec2:DeleteVolume)"
        in (report["unused"])
    )
