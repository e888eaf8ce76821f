"""The IAM checker of a twin process (twin/iam/check.py's _CHECKER, check.mjs): one process
serves every run, and a request it decided for the same caller policies before is not simulated
again; other policies are simulated anew."""

from __future__ import annotations

from typing import Any

from twin.iam.check import _CHECKER


def policy(*actions: str) -> list[dict[str, Any]]:
    statement = {"Effect": "Allow", "Action": list(actions), "Resource": "*"}
    return [{"name": "p", "policy": {"Version": "2012-10-17", "Statement": [statement]}}]


def job(policies: list[dict[str, Any]], request_id: int) -> dict[str, Any]:
    request = {
        "id": request_id, "caller": "fn", "action": "ec2:DescribeInstances", "resource": "*",
        "resourceType": None, "accountId": "123456789012", "context": {},
    }  # fmt: skip
    return {"policies": {"fn": policies}, "requests": [request]}


def test_a_decided_request_is_not_simulated_again_for_the_same_policies() -> None:
    allowing = policy("ec2:DescribeInstances", "ec2:DescribeVolumes")
    first = _CHECKER.decide(job(allowing, 1))
    assert [(d["id"], d["decision"]) for d in first["decisions"]] == [(1, "Allowed")]
    again = _CHECKER.decide(job(allowing, 2))
    assert [(d["id"], d["decision"]) for d in again["decisions"]] == [(2, "Allowed")]
    assert again["simulated"] == 0
    other = _CHECKER.decide(job(policy("ec2:DescribeVolumes"), 3))
    assert [(d["id"], d["decision"]) for d in other["decisions"]] == [(3, "ImplicitlyDenied")]
    assert other["simulated"] == 1
