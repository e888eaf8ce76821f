"""The contract between the stack and the Lambdas, as data: `contract/*.json` (docs/contract.md).

The stack (lib/) reads the same files, so a limit, an environment key, a task or an error name
is written once. In the Lambda asset `contract/` sits beside this package (lib/task-functions.ts
copies it there); in the repository it is at the root. Each file is read once per process."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypedDict, cast

_HERE = Path(__file__).resolve().parent
# the asset's layout first (contract/ beside compactor/), then the repository's
_CANDIDATES = (_HERE.parent / "contract", _HERE.parents[1] / "contract")


class TaskState(TypedDict):
    state: str
    stateMachine: Literal["main", "attempt", "cleanup", "batch"]
    # "$" = the whole state; else keys to JSONPaths ("$..."), literals or nested objects
    payload: dict[str, Any] | Literal["$"]
    resultPath: str


class Task(TypedDict):
    module: str
    timeoutSeconds: int
    workflow: bool
    summary: str
    states: list[TaskState]


class Limit(TypedDict):
    value: int | float
    unit: str
    description: str


class Variable(TypedDict, total=False):
    name: str
    functions: list[str]
    readBy: str
    description: str
    checked: str
    value: str


def directory() -> Path:
    """The `contract/` folder this package reads."""
    for candidate in _CANDIDATES:
        if (candidate / "tasks.json").is_file():
            return candidate
    raise FileNotFoundError(
        "contract/ not found beside the compactor package or at the repository root "
        f"(looked in {', '.join(str(c) for c in _CANDIDATES)}): the Lambda asset must ship it"
    )


@cache
def load(name: str) -> Any:
    """contract/<name>.json, parsed (once per process)."""
    with (directory() / f"{name}.json").open(encoding="utf-8") as file:
        return json.load(file)


def tasks() -> list[Task]:
    return cast(list[Task], load("tasks")["tasks"])


def task_modules(workflow_only: bool = False) -> tuple[str, ...]:
    """Every handler module in workflow order (start_from_tag last); `workflow_only`: those the
    state machines call."""
    return tuple(t["module"] for t in tasks() if t["workflow"] or not workflow_only)


def phases() -> tuple[str, ...]:
    """Keys of the state's `timings` (besides `start`), one per phase, in workflow order."""
    return tuple(load("tasks")["phases"])


def limits() -> dict[str, Limit]:
    return cast(dict[str, Limit], load("limits")["limits"])


def limit(name: str) -> int:
    """An integer limit of contract/limits.json (KeyError for an unknown name)."""
    value = limits()[name]["value"]
    if not isinstance(value, int):
        raise TypeError(f"limit {name} is {value!r}, not a whole number: use limit_value")
    return value


def limit_value(name: str) -> float:
    """Any limit of contract/limits.json, as a number."""
    return float(limits()[name]["value"])


def dataplane_constant(name: str) -> int:
    """A constant of contract/dataplane.json (what the data-plane program shares with the
    Lambdas; the program reads it from its generated sparsecopy/shared.py)."""
    value = load("dataplane")["constants"][name]["value"]
    if not isinstance(value, int):
        raise TypeError(f"data-plane constant {name} is {value!r}, not a whole number")
    return value


def variables() -> list[Variable]:
    return cast(list[Variable], load("environment")["variables"])


def variable_names(reader: str) -> tuple[str, ...]:
    """The environment keys `reader` (Config, TriggerConfig, Powertools) reads."""
    return tuple(
        v["name"] for v in variables() if reader in (r.strip() for r in v["readBy"].split(","))
    )


def task_variable_names(task: str, reader: str) -> tuple[str, ...]:
    """The keys `reader` reads that contract/environment.json gives the function `task`."""
    return tuple(
        v["name"]
        for v in variables()
        if task in v["functions"] and v["name"] in variable_names(reader)
    )


def errors() -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], load("errors")["errors"])


def error_names(cls: str | None = "CompactorError") -> tuple[str, ...]:
    """Names of the errors whose `class` is `cls` (None: those the state machine raises)."""
    return tuple(e["name"] for e in errors() if e["class"] == cls)
