"""One warm "Lambda container": imports a handler once and serves invocations from the runner.

Protocol (one JSON object per line): stdin {"id", "requestId", "event"} -> stdout {"id", "ok",
"result"} or {"id", "ok": false, "errorType", "errorMessage", "stackTrace"}.  Anything the handler
prints or logs goes to stderr (the runner keeps it in a per-function log), never into the protocol.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any
from urllib.parse import quote

# The Task state the current invocation runs for (the runner sends it with each request); every
# AWS request is marked with it so the emulator can throttle one state's calls (throttle@STATE).
_current: dict[str, str | None] = {"state": None}


def _mark_state(request: Any, **_: Any) -> None:
    state = _current["state"]
    if state:
        request.headers["X-Twin-State"] = quote(state, safe="")


def _install_state_header() -> None:
    """On the default session, before the handler creates any client (clients copy the hooks)."""
    import boto3

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("before-send", _mark_state)  # type: ignore[union-attr]


class LambdaContext:
    """The attributes of the Lambda context object that handlers and Powertools read."""

    def __init__(self, function_arn: str, request_id: str, timeout_seconds: int = 900) -> None:
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "twin-function")
        self.function_version = "$LATEST"
        self.invoked_function_arn = function_arn
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "twin"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "ok": False,
        "errorType": type(exc).__name__,
        "errorMessage": str(exc),
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


def _mark_aws_calls(function_name: str) -> None:
    """Every AWS request of this worker carries X-Twin-Caller: the emulator records (and the IAM
    check judges) only the Lambdas' calls, not the twin's own set-up and inspection
    (twin/iam/recorder.py)."""
    import boto3

    def add_header(request: Any, **_: Any) -> None:
        request.headers["X-Twin-Caller"] = function_name

    # the default session (made by whoever set it up first), before the handler creates any client
    boto3._get_default_session().events.register("before-send", add_header)


def main() -> None:
    handler_path, function_arn = sys.argv[1], sys.argv[2]
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints and EMF metrics of the handler go to the log, not the protocol
    sys.stdout = sys.stderr
    module_name, _, attr = handler_path.rpartition(".")
    _install_state_header()
    _mark_aws_calls(os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "twin-function"))
    try:
        handler = getattr(importlib.import_module(module_name), attr)
        init_error = None
    except Exception as exc:  # Lambda reports init failures on every invocation
        handler, init_error = None, exc
    for line in sys.stdin:
        request = json.loads(line)
        _current["state"] = request.get("state")
        if init_error is not None:
            reply = _error(init_error)
        else:
            try:
                context = LambdaContext(function_arn, request["requestId"])
                result = handler(request["event"], context)
                reply = {"ok": True, "result": json.loads(json.dumps(result, default=str))}
            except Exception as exc:
                reply = _error(exc)
        protocol.write(json.dumps({"id": request["id"], **reply}) + "\n")


if __name__ == "__main__":
    main()
