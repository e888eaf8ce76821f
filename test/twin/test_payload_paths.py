"""Every JSONPath the synthesized workflows read from a task's result names a key that task's
result schema has (contract/schemas/results/, by the resultPath contract/tasks.json gives it), and
every path into `$.input` a key of the execution input's schema: lib/ writes the paths, the schemas
are the one source of the payloads, and nothing else would notice a renamed key before a run took
the wrong branch."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT7

from twin.deploy import deploy
from twin.emulator.server import Emulator
from twin.execution import state_machines

CONTRACT = Path(__file__).resolve().parents[2] / "contract"
SCHEMAS = CONTRACT / "schemas"
BASE = "https://contract.invalid/schemas/"
PATH = re.compile(r"(?<![\$\w])\$((?:\.[A-Za-z_][\w]*|\[[^\]]*\])+)")
# Keys whose paths do not read the state: where a result goes, and the raw result or a Map item.
NOT_THE_STATE = {"ResultPath", "ResultSelector", "ItemSelector", "ItemProcessor", "Iterator"}


def registry() -> Registry[Any]:
    resources = [
        (BASE + str(p.relative_to(SCHEMAS)), DRAFT7.create_resource(json.loads(p.read_text())))
        for p in SCHEMAS.rglob("*.json")
    ]
    return Registry().with_resources(resources)


def roots() -> dict[str, str]:
    """The first key of a state path -> the schema of what is stored there."""
    tasks = json.loads((CONTRACT / "tasks.json").read_text())["tasks"]
    out = {"input": "execution-input.schema.json"}
    for task in tasks:
        for state in task.get("states", []):
            path = state.get("resultPath", "")
            if path.count(".") == 1 and path.startswith("$."):
                out[path[2:]] = f"results/{task['module']}.schema.json"
    return out


def steps(path: str) -> list[str]:
    """`.snapshots[*].snapshotId` -> ["snapshots", "[]", "snapshotId"]."""
    return [key or "[]" for key, _ in re.findall(r"\.(\w+)|(\[[^\]]*\])", path)]


def resolves(node: Any, resolver: Any, rest: list[str]) -> bool:
    if not isinstance(node, dict):
        return not rest
    if "$ref" in node:
        found = resolver.lookup(node["$ref"])
        return resolves(found.contents, found.resolver, rest)
    if not rest:
        return True
    branches = [*node.get("allOf", []), *node.get("anyOf", []), *node.get("oneOf", [])]
    branches += [node[k] for k in ("then", "else") if k in node]
    if any(resolves(b, resolver, rest) for b in branches):
        return True
    step, after = rest[0], rest[1:]
    if step == "[]":
        return "items" in node and resolves(node["items"], resolver, after)
    if step in node.get("properties", {}):
        return resolves(node["properties"][step], resolver, after)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return resolves(extra, resolver, after)
    # an object the schema leaves open (no properties named) holds whatever it is given
    return "properties" not in node and not branches and extra is not False


def paths_read(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(where, JSONPath) of every state path a definition reads."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in NOT_THE_STATE:
                continue
            here = f"{where}/{key}"
            reads = (
                key.endswith(".$")
                or key == "Variable"
                or (key.endswith("Path") and key != "ResultPath")
            )
            if reads and isinstance(value, str):
                yield from ((here, "$" + m) for m in PATH.findall(value))
            else:
                yield from paths_read(value, here)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from paths_read(item, f"{where}[{i}]")


def unresolved(definitions: dict[str, dict[str, Any]]) -> list[str]:
    """Each path into a known root that its schema does not have, as `machine/where: path`."""
    known, reg = roots(), registry()
    out = []
    for name, definition in definitions.items():
        for where, path in paths_read(definition.get("States", {})):
            first, *rest = steps(path[1:]) or [""]
            if first not in known:
                continue  # a key the workflow sets itself (Pass states, Catch results)
            uri = BASE + known[first]
            resource = reg.get_or_retrieve(uri).value
            if not resolves(resource.contents, reg.resolver(base_uri=uri), rest):
                out.append(f"{name}{where}: {path}")
    return out


@pytest.fixture(scope="module")
def definitions(cdk_out: Path) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as work, Emulator(Path(work) / "emulator") as emu:
        machines = state_machines(deploy(emu, cdk_out), cdk_out)
    return {m.name: m.definition for m in machines.values()}


def test_every_path_into_a_task_result_names_a_key_of_its_schema(
    definitions: dict[str, dict[str, Any]],
) -> None:
    checked = [p for d in definitions.values() for _, p in paths_read(d.get("States", {}))]
    assert len([p for p in checked if steps(p[1:])[0] in roots()]) > 50  # the check sees them
    assert unresolved(definitions) == []


def test_a_renamed_key_is_found() -> None:
    definition = {"States": {
        "Done?": {"Type": "Choice", "Choices": [
            {"Variable": "$.teardown.remaining", "NumericEquals": 0, "Next": "x"},
            {"Variable": "$.teardown.remainingCount", "NumericEquals": 0, "Next": "x"}]},
        "Copy": {"Type": "Task", "Parameters": {
            "ids.$": "$.snapshots.snapshots[*].snapshotId",
            "bad.$": "$.snapshots.snapshots[*].snapshotIdentifier",
            "name.$": "States.Format('{}', $.input.snapshotId)"}},
    }}  # fmt: skip
    assert unresolved({"m": definition}) == [
        "m/Done?/Choices[1]/Variable: $.teardown.remainingCount",
        "m/Copy/Parameters/bad.$: $.snapshots.snapshots[*].snapshotIdentifier",
    ]
