"""The runner's Distributed Map and StartExecution emulation (twin/runner/distributed_map.mjs,
start_execution.mjs) on small hand-written definitions with Pass, Wait, Choice and Fail states:
no emulator, no disks (ResultWriter writes into a directory: the job's resultWriterDir)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from twin_helpers import REPO, run_runner  # type: ignore[import-not-found]

ACCOUNT_REGION = "us-east-1:123456789012"
PARENT = f"arn:aws:states:{ACCOUNT_REGION}:stateMachine:parent"
CHILD = f"arn:aws:states:{ACCOUNT_REGION}:stateMachine:child"
WRITER = {"Resource": "arn:aws:states:::s3:putObject",
          "Parameters": {"Bucket": "results", "Prefix": "batches/"}}  # fmt: skip

# An item with "bad" fails; each item waits `wait` AWS seconds (x 50 ms here).
PROCESSOR = {
    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
    "StartAt": "Wait a bit",
    "States": {
        "Wait a bit": {"Type": "Wait", "Seconds": 2, "Next": "Bad?"},
        "Bad?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.bad", "IsPresent": True, "Next": "Fail item"}],
            "Default": "Done",
        },
        "Fail item": {"Type": "Fail", "Error": "ItemFailed", "Cause": "a bad item"},
        "Done": {"Type": "Pass", "Parameters": {"id.$": "$.id"}, "End": True},
    },
}


def map_state(**fields: Any) -> dict[str, Any]:
    return {
        "Type": "Map",
        "ItemProcessor": PROCESSOR,
        "ItemsPath": "$.items",
        "ResultPath": "$.map",
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.mapError", "Next": "Failed"}],
        "Next": "Done",
        **fields,
    }


def definition(state: dict[str, Any]) -> dict[str, Any]:
    return {
        "StartAt": "Each",
        "States": {
            "Each": state,
            "Done": {"Type": "Succeed"},
            "Failed": {"Type": "Fail", "Error": "MapFailed"},
        },
    }


def run(tmp_path: Path, definition: dict[str, Any], execution_input: Any,
        machines: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    writer = str(tmp_path / "s3")
    proc = run_runner(tmp_path, definition, execution_input, PARENT, 50,
                      resultWriterDir=writer, stateMachines=machines or {})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


def s3(tmp_path: Path, key: str) -> Any:
    return json.loads((tmp_path / "s3" / "results" / key).read_text())


def max_overlap(items: list[dict[str, Any]]) -> int:
    """The most items running at one moment, from their start and stop times."""
    edges = sorted([(i["startedAt"], 1) for i in items if i.get("startedAt")]
                   + [(i["stoppedAt"], -1) for i in items if i.get("stoppedAt")],
                   key=lambda e: (e[0], e[1]))  # fmt: skip
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def items(n: int, bad: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    return [{"id": f"i{k}", **({"bad": True} if k in bad else {})} for k in range(n)]


def test_max_concurrency_path_is_honoured(tmp_path: Path) -> None:
    for limit in (1, 2):
        out = tmp_path / str(limit)
        out.mkdir()
        result = run(out, definition(map_state(MaxConcurrencyPath="$.limit")),
                     {"items": items(4), "limit": limit})  # fmt: skip
        assert result["status"] == "SUCCEEDED"
        (map_run,) = result["mapRuns"]
        assert map_run["maxConcurrency"] == limit
        assert map_run["maxRunning"] == limit
        assert max_overlap(map_run["items"]) == limit
        assert [i["status"] for i in map_run["items"]] == ["SUCCEEDED"] * 4


def test_result_writer_shapes_and_a_tolerated_failure(tmp_path: Path) -> None:
    selector = {"id.$": "$$.Map.Item.Value.id", "index.$": "$$.Map.Item.Index",
                "item.$": "$$.Map.Item.Value"}  # fmt: skip
    is_bad = {"Variable": "$.item.bad", "IsPresent": True, "Next": "Fail item"}
    bad_choice = {"Type": "Choice", "Default": "Done", "Choices": [is_bad]}
    processor = {**PROCESSOR, "States": {**PROCESSOR["States"], "Bad?": bad_choice}}
    state = map_state(ToleratedFailurePercentagePath="$.tolerated", ResultWriter=WRITER,
                      ItemSelector=selector, ItemProcessor=processor)  # fmt: skip
    result = run(tmp_path, definition(state), {"items": items(3, bad=(1,)), "tolerated": 50})
    assert result["status"] == "SUCCEEDED", result
    details = result["output"]["map"]
    assert set(details) == {"MapRunArn", "ResultWriterDetails"}
    assert details["MapRunArn"].startswith(f"arn:aws:states:{ACCOUNT_REGION}:mapRun:parent/Each:")
    assert details["ResultWriterDetails"]["Bucket"] == "results"
    manifest = s3(tmp_path, details["ResultWriterDetails"]["Key"])
    assert manifest["DestinationBucket"] == "results"
    assert manifest["MapRunArn"] == details["MapRunArn"]
    assert manifest["ResultFiles"]["PENDING"] == []
    (ok_file,) = manifest["ResultFiles"]["SUCCEEDED"]
    (failed_file,) = manifest["ResultFiles"]["FAILED"]
    assert ok_file["Key"].startswith("batches/") and ok_file["Key"].endswith("/SUCCEEDED_0.json")
    succeeded, failed = s3(tmp_path, ok_file["Key"]), s3(tmp_path, failed_file["Key"])
    assert ok_file["Size"] == len(json.dumps(succeeded, separators=(",", ":")))
    assert sorted(json.loads(e["Output"])["id"] for e in succeeded) == ["i0", "i2"]
    assert {e["Status"] for e in succeeded} == {"SUCCEEDED"}
    (bad,) = failed
    assert (bad["Status"], bad["Error"], bad["Cause"]) == ("FAILED", "ItemFailed", "a bad item")
    assert json.loads(bad["Input"]) == {"id": "i1", "index": 1, "item": {"id": "i1", "bad": True}}
    assert bad["ExecutionArn"].startswith(f"arn:aws:states:{ACCOUNT_REGION}:execution:parent/Each:")
    assert "Output" not in bad


def test_tolerance_zero_fails_the_map_and_leaves_the_rest_pending(tmp_path: Path) -> None:
    state = map_state(ToleratedFailurePercentage=0, MaxConcurrency=1, ResultWriter=WRITER)
    result = run(tmp_path, definition(state), {"items": items(4, bad=(1,))})
    assert result["status"] == "FAILED" and result["error"] == "MapFailed"
    (map_run,) = result["mapRuns"]
    assert map_run["error"] == "States.ExceedToleratedFailureThreshold"
    assert [i["status"] for i in map_run["items"]] == ["SUCCEEDED", "FAILED", "PENDING", "PENDING"]
    caught = [e for e in result["events"] if e["state"] == "Failed"]
    assert caught, "the Map's Catch goes on to the Fail state"
    manifest = s3(tmp_path, map_run["resultWriterDetails"]["Key"])
    pending = s3(tmp_path, manifest["ResultFiles"]["PENDING"][0]["Key"])
    assert [json.loads(p["Input"])["id"] for p in pending] == ["i2", "i3"]


def test_without_a_threshold_one_failure_fails_and_without_writer_the_result_is_a_list(
    tmp_path: Path,
) -> None:
    (tmp_path / "ok").mkdir()
    ok = run(tmp_path / "ok", definition(map_state()), {"items": items(2)})
    assert ok["status"] == "SUCCEEDED"
    assert ok["output"]["map"] == [{"id": "i0"}, {"id": "i1"}]
    failed = run(tmp_path, definition(map_state(ToleratedFailureCount=1)),
                 {"items": items(3, bad=(0, 2))})  # fmt: skip
    assert failed["status"] == "FAILED"
    assert failed["mapRuns"][0]["error"] == "States.ExceedToleratedFailureThreshold"


def test_refuses_what_it_does_not_emulate(tmp_path: Path) -> None:
    state = map_state(ItemReader={"Resource": "arn:aws:states:::s3:getObject"})
    result = run(tmp_path, definition(state), {"items": items(1)})
    assert result["status"] == "FAILED"
    assert "does not emulate ItemReader" in str(result["events"])


CHILD_DEF = {
    "StartAt": "Bad?",
    "States": {
        "Bad?": {"Type": "Choice", "Default": "Ok",
                 "Choices": [{"Variable": "$.bad", "IsPresent": True, "Next": "No"}]},
        "No": {"Type": "Fail", "Error": "InvalidInput", "Cause": "no such snapshot"},
        "Ok": {"Type": "Wait", "Seconds": 2, "Next": "Out"},
        "Out": {"Type": "Pass", "Parameters": {"done.$": "$.id",
                "parent.$": "$.AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID"}, "End": True},
    },
}  # fmt: skip
MACHINES = {CHILD: {"arn": CHILD, "name": "child", "definition": CHILD_DEF}}


def start_task(name_path: str = "$.name", **fields: Any) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::states:startExecution.sync:2",
        "Parameters": {
            "StateMachineArn": CHILD,
            "Name.$": name_path,
            "Input": {
                "id.$": "$.id",
                "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$": "$$.Execution.Id",
            },
        },
        **fields,
    }


def test_start_execution_sync2_returns_describe_execution_with_parsed_output(
    tmp_path: Path,
) -> None:
    task = start_task(ResultPath="$.child", End=True)
    definition = {"StartAt": "Start", "States": {"Start": task}}
    result = run(tmp_path, definition, {"name": "c1", "id": "x"}, MACHINES)
    assert result["status"] == "SUCCEEDED", result
    child = result["output"]["child"]
    assert child["Status"] == "SUCCEEDED"
    parent = f"{PARENT.replace('stateMachine', 'execution')}:e1"
    assert child["Output"] == {"done": "x", "parent": parent}
    assert child["ExecutionArn"] == f"arn:aws:states:{ACCOUNT_REGION}:execution:child:c1"
    assert child["Name"] == "c1" and isinstance(child["StartDate"], int)
    assert json.loads(child["Input"])["id"] == "x"
    (started,) = result["childExecutions"]
    assert started["status"] == "SUCCEEDED"
    assert (tmp_path / "logs" / "c1.result.json").exists(), "the child ran as its own runner"


def test_a_failed_child_fails_the_task_with_states_task_failed(tmp_path: Path) -> None:
    task = start_task(ResultPath="$.child", End=True)
    task["Parameters"]["Input"]["bad"] = True
    result = run(tmp_path, {"StartAt": "Start", "States": {"Start": task}},
                 {"name": "c2", "id": "x"}, MACHINES)  # fmt: skip
    assert (result["status"], result["error"]) == ("FAILED", "States.TaskFailed")
    cause = json.loads(result["cause"])
    assert (cause["Status"], cause["Error"], cause["Cause"]) == (
        "FAILED", "InvalidInput", "no such snapshot")  # fmt: skip


def test_execution_names_are_idempotent(tmp_path: Path) -> None:
    # Two branches start the same name with the same input at once: one execution; a third start
    # of that name after it closed: ExecutionAlreadyExists.
    definition = {
        "StartAt": "Both",
        "States": {
            "Both": {"Type": "Parallel", "ResultPath": "$.both", "Next": "Again", "Branches": [
                {"StartAt": "A", "States": {"A": start_task(End=True)}},
                {"StartAt": "B", "States": {"B": start_task(End=True)}},
            ]},
            "Again": start_task(ResultPath="$.again", End=True),
        },
    }  # fmt: skip
    result = run(tmp_path, definition, {"name": "same", "id": "x"}, MACHINES)
    assert len(result["childExecutions"]) == 1
    assert result["status"] == "FAILED"
    assert result["error"] == "StepFunctions.ExecutionAlreadyExistsException"
    assert [e["state"] for e in result["events"] if e["type"] == "StateSucceeded" or
            e["type"] == "StateExited"].count("Both") == 1  # fmt: skip


def test_map_of_children_each_its_own_execution(tmp_path: Path) -> None:
    processor = {
        "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
        "StartAt": "Compact",
        "States": {"Compact": start_task(ResultSelector={"Output.$": "$.Output",
                                                           "Status.$": "$.Status"},
                                           ResultPath="$.compacted", End=True)},
    }  # fmt: skip
    state = map_state(ItemProcessor=processor, MaxConcurrency=2, ToleratedFailurePercentage=100,
                      ResultWriter=WRITER)  # fmt: skip
    batch = {"items": [{"name": f"n{k}", "id": f"s{k}"} for k in range(3)]}
    batch["items"].append({"name": "n-bad", "id": "s-bad"})
    result = run(tmp_path, definition(state), batch, {
        CHILD: {**MACHINES[CHILD], "definition": {**CHILD_DEF, "StartAt": "Ok"}}})  # fmt: skip
    assert result["status"] == "SUCCEEDED", result
    children = result["childExecutions"]
    assert sorted(c["name"] for c in children) == ["n-bad", "n0", "n1", "n2"]
    parents = {c["parent"] for c in children}
    assert len(parents) == 4 and all(":execution:parent/Each:" in p for p in parents)
    assert max_overlap([{"startedAt": c["startedAt"], "stoppedAt": c["stoppedAt"]}
                        for c in children]) == 2  # fmt: skip


def test_map_and_start_execution_tasks_wait_as_long_as_in_aws() -> None:
    # The library fails a Task after 60 s by default (the ASL spec); AWS's Map state has no
    # timeout and a StartExecution Task without TimeoutSeconds waits on: a copy takes minutes.
    script = (
        "import('./twin/runner/distributed_map.mjs').then((m) => console.log(JSON.stringify("
        "m.withDistributedMapsAsTasks(JSON.parse(process.argv[1])))))"
    )
    state = map_state(ItemProcessor={**PROCESSOR, "States": {"Compact": {
        **start_task(), "End": True}}, "StartAt": "Compact"})  # fmt: skip
    given = {"StartAt": "Each", "States": {"Each": state, "Own": start_task(TimeoutSeconds=5)}}
    proc = subprocess.run(["node", "-e", script, json.dumps(given)], capture_output=True,
                          text=True, cwd=REPO, check=True)  # fmt: skip
    prepared = json.loads(proc.stdout)
    placeholder = prepared["States"]["Each"]
    assert placeholder["Type"] == "Task" and placeholder["TimeoutSeconds"] > 24 * 3600
    assert placeholder["Catch"] == state["Catch"] and placeholder["ResultPath"] == "$.map"
    assert "ItemProcessor" not in placeholder and "ItemsPath" not in placeholder
    assert prepared["States"]["Own"]["TimeoutSeconds"] == 5
