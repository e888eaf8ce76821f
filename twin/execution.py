"""Runs one execution of the deployed state machine with the ASL interpreter (twin/runner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cfn import Deployment
from .emulator.server import Emulator

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "twin" / "runner" / "run.mjs"
WORKER = REPO / "twin" / "runner" / "lambda_worker.py"


@dataclass
class ExecutionResult:
    name: str
    input: Any
    status: str
    output: Any
    error: str | None
    cause: str | None
    events: list[dict[str, Any]]
    invocations: list[dict[str, Any]]
    workflow_report: Any = None
    states_visited: list[str] = field(default_factory=list)
    state_seconds: list[dict[str, Any]] = field(default_factory=list)


def _durations(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    entered: dict[str, float] = {}
    out = []
    for event in events:
        if event["type"] == "StateEntered":
            entered[event["state"]] = event["timestamp"]
        elif event["type"] == "StateExited" and event["state"] in entered:
            start = entered.pop(event["state"])
            out.append(
                {
                    "state": event["state"],
                    "type": event["stateType"],
                    "seconds": round((event["timestamp"] - start) / 1000, 3),
                }
            )
    return out


def execute(
    emu: Emulator,
    deployment: Deployment,
    execution_input: Any,
    name: str,
    logdir: Path,
    env_overrides: dict[str, str] | None = None,
    throttled_calls_per_function: int = 0,
    wait_ms: int = 100,
    retry_ms: int = 100,
    timeout_seconds: int = 900,
) -> ExecutionResult:
    logdir.mkdir(parents=True, exist_ok=True)
    env_common = {
        **emu.client_env(),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_DEV": "false",
        **(env_overrides or {}),
    }
    functions = {
        arn: {
            "name": f.name,
            "handler": f.handler,
            "env": {**f.env, **env_common},
            "codeDir": str(f.code_dir),
            "memory": f.memory,
        }
        for arn, f in deployment.functions.items()
    }
    execution_arn = (
        f"arn:aws:states:{deployment.region}:{deployment.account}:execution:"
        f"{deployment.state_machine_name}:{name}"
    )
    job = {
        "definition": deployment.definition,
        "input": execution_input,
        "context": {
            "Execution": {
                "Id": execution_arn,
                "Name": name,
                "RoleArn": f"arn:aws:iam::{deployment.account}:role/twin-state-machine",
            },
            "StateMachine": {
                "Id": deployment.state_machine_arn,
                "Name": deployment.state_machine_name,
            },
        },
        "functions": functions,
        "python": sys.executable,
        "worker": str(WORKER),
        "logDir": str(logdir),
        "waitMs": wait_ms,
        "retryMs": retry_ms,
        "throttledCallsPerFunction": throttled_calls_per_function,
    }
    job_path, result_path = logdir / f"{name}.job.json", logdir / f"{name}.result.json"
    job_path.write_text(json.dumps(job))
    proc = subprocess.run(
        ["node", str(RUNNER), str(job_path), str(result_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        env={**os.environ},
    )
    if proc.returncode != 0 or not result_path.exists():
        raise RuntimeError(
            f"the ASL runner failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    raw = json.loads(result_path.read_text())
    events = raw["events"]
    result = ExecutionResult(
        name=name,
        input=execution_input,
        status=raw["status"],
        output=raw["output"],
        error=raw["error"],
        cause=raw["cause"],
        events=events,
        invocations=raw["invocations"],
        workflow_report=raw.get("workflowReport"),
        states_visited=[e["state"] for e in events if e["type"] == "StateEntered"],
        state_seconds=_durations(events),
    )
    return result
