"""The metrics of contract/metrics.json: what the report, launch and sweep tasks print in the
CloudWatch embedded metric format (EMF), read back from stdout the way CloudWatch Logs would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from compactor import aws, contract, observability
from compactor.handlers import report
from compactor.observability import MARKETS, emit, task_handler
from conftest import STACK, World
from support import FakeLambdaContext, amend, capture
from test_launch import fail_pools, plan_for, run
from test_report import success_state

REPO = Path(__file__).resolve().parents[2]
SERVICE = observability.SERVICE


def emf_points(out: str) -> list[dict[str, Any]]:
    """One entry per metric value of every EMF blob printed: name, unit, value, dimensions."""
    points = []
    for line in out.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        blob = json.loads(line)
        (directive,) = blob["_aws"]["CloudWatchMetrics"]
        (dimension_names,) = directive["Dimensions"]
        dimensions = {name: blob[name] for name in dimension_names}
        for metric in directive["Metrics"]:
            values = blob[metric["Name"]]
            for value in values if isinstance(values, list) else [values]:
                points.append(
                    {
                        "namespace": directive["Namespace"],
                        "name": metric["Name"],
                        "unit": metric["Unit"],
                        "value": value,
                        "dimensions": dimensions,
                    }
                )
    return points


def named(points: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [p for p in points if p["name"] == name]


def test_report_emits_outcome_bytes_saved_phases_and_market(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    state = success_state(world)
    state["instance"] = {"instanceId": "i-1", "market": "on-demand"}
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [
            s.update(FullSnapshotSizeInBytes=2_097_152_000) for s in parsed["Snapshots"]
        ],
    )
    capture(aws.events(), "PutEvents")
    capsys.readouterr()
    result = report.handler(state, world.context)
    points = emf_points(capsys.readouterr().out)
    stack = {"service": SERVICE, "Stack": STACK}
    (succeeded,) = named(points, "Succeeded")
    assert (succeeded["value"], succeeded["unit"], succeeded["dimensions"]) == (1, "Count", stack)
    assert succeeded["namespace"] == observability.NAMESPACE
    (saved,) = named(points, "BytesSaved")
    assert (saved["value"], saved["unit"]) == (8_589_934_592 - 2_097_152_000, "Bytes")
    assert saved["dimensions"] == stack
    phases = {p["dimensions"]["Phase"]: p["value"] for p in named(points, "PhaseSeconds")}
    assert phases == result["phaseSeconds"]
    assert phases["compaction"] == 600.0
    assert {p["unit"] for p in named(points, "PhaseSeconds")} == {"Seconds"}
    (market,) = named(points, "ExecutionsByMarket")
    assert market["dimensions"] == {**stack, "Market": "OnDemand"}
    assert not named(points, "Failed")


def test_a_failure_counts_as_failed_and_saves_nothing(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    state = success_state(world)
    state.update(outcome="failure", error={"Error": "InstanceLost", "Cause": "gone"})
    state.pop("snapshots")
    capture(aws.events(), "PutEvents")
    capsys.readouterr()
    assert report.handler(state, world.context)["outcome"] == "failure"
    points = emf_points(capsys.readouterr().out)
    assert [p["value"] for p in named(points, "Failed")] == [1]
    assert not named(points, "Succeeded") and not named(points, "BytesSaved")
    assert not named(points, "ExecutionsByMarket")  # no instance in this state


def test_capacity_errors_carry_the_market(capsys: pytest.CaptureFixture[str]) -> None:
    @task_handler
    def handler(event: dict[str, Any], context: Any) -> None:
        emit("CapacityErrors", 1, {"Market": "Spot"})
        emit("CapacityErrors", 1, {"Market": "Spot"})
        emit("CapacityErrors", 1, {"Market": "OnDemand"})

    handler({}, FakeLambdaContext())
    points = named(emf_points(capsys.readouterr().out), "CapacityErrors")
    assert sorted(p["dimensions"]["Market"] for p in points) == ["OnDemand", "Spot", "Spot"]


def test_launch_counts_capacity_errors_by_market(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Spot pool without capacity is one CapacityErrors point with Market Spot, then the
    On-Demand launch counts as LaunchedOnDemand."""
    plan = plan_for(world)
    spot = [("spot", t, s) for t in ("m7i.large", "m6i.large") for s in world.subnets]
    fail_pools(dict.fromkeys(spot, "InsufficientInstanceCapacity"))
    capsys.readouterr()
    assert run(world, plan)["market"] == "on-demand"
    points = emf_points(capsys.readouterr().out)
    capacity = named(points, "CapacityErrors")
    assert [p["dimensions"]["Market"] for p in capacity] == ["Spot"] * len(spot)
    assert {p["dimensions"]["Stack"] for p in capacity} == {STACK}
    assert [p["value"] for p in named(points, "LaunchedOnDemand")] == [1]
    assert not named(points, "LaunchedSpot")


def test_emit_refuses_what_the_contract_does_not_name() -> None:
    with pytest.raises(ValueError, match=r"not in contract/metrics\.json"):
        emit("Typo", 1)
    with pytest.raises(ValueError, match=r"takes the dimensions \['Phase'\]"):
        emit("PhaseSeconds", 1)


def test_the_metrics_contract_matches_the_code_the_stack_and_the_docs() -> None:
    spec = contract.load("metrics")
    variables = {v["name"]: v for v in contract.variables()}
    assert spec["namespace"] == variables["POWERTOOLS_METRICS_NAMESPACE"]["value"]
    assert sorted(spec["dimensionValues"]["Market"]) == sorted(MARKETS.values())
    outcomes = json.loads((REPO / "contract/schemas/report.schema.json").read_text())
    report_outcomes = set(outcomes["properties"]["outcome"]["enum"])
    assert report_outcomes <= set(spec["outcomeMetrics"])
    assert set(spec["outcomeMetrics"].values()) <= set(spec["metrics"])
    modules = set(contract.task_modules())
    for name, metric in spec["metrics"].items():
        assert metric["emittedBy"] in modules, name
        assert metric["unit"] in {"Count", "Bytes", "Seconds"}, name
    doc = (REPO / "docs/operations.md").read_text()
    missing = [name for name in spec["metrics"] if f"`{name}`" not in doc]
    assert not missing, f"docs/operations.md does not describe {missing}"
