"""The Lambda zygote (twin/runner/lambda_zygote.py, twin/zygote.py): the workers it forks run
their function's handler with the request's environment, and compile the function's modules once
into the zygote's own bytecode cache, never into the function's code directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from twin import zygote

HANDLER = """
import os
import sys

def handler(event, context):
    return {"echo": event, "function": os.environ["AWS_LAMBDA_FUNCTION_NAME"],
            "cached": sys.pycache_prefix}
"""


def invoke(code: Path, name: str, event: object) -> dict[str, object]:
    """One worker from the zygote, as run.mjs starts it, with one invocation."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(code), "AWS_LAMBDA_FUNCTION_NAME": name}
    done = subprocess.run(
        [sys.executable, "-S", str(zygote.SPAWN), str(zygote.socket_path()), "fn.handler", "arn"],
        input=json.dumps({"id": 1, "requestId": "r1", "event": event}) + "\n",
        capture_output=True, text=True, env=env, cwd=code, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    reply: dict[str, object] = json.loads(done.stdout)
    return reply


def test_workers_compile_a_function_once_into_the_zygotes_cache(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "fn.py").write_text(HANDLER)
    first = invoke(code, "one", {"n": 1})
    assert first["ok"] and first["result"] == {
        "echo": {"n": 1}, "function": "one", "cached": str(zygote.socket_path().parent / "pycache")
    }  # fmt: skip
    cached = sorted(zygote.socket_path().parent.glob(f"pycache{code}/fn.*.pyc"))
    assert len(cached) == 1, "the first worker compiled fn.py into the zygote's cache"
    stamp = cached[0].stat().st_mtime_ns
    second = invoke(code, "two", {"n": 2})
    assert second["ok"] and second["result"]["function"] == "two"  # type: ignore[index]
    assert cached[0].stat().st_mtime_ns == stamp, "the second worker read it, did not compile"
    assert not list(code.rglob("*.pyc")), "nothing is written into the function's code"
