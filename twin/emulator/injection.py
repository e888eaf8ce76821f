"""Faults the runner asks for while an execution runs, at the emulator's HTTP front door.

- `throttle@STATE`: the Lambda worker marks every AWS request with `X-Twin-State: <Task state>`
  (percent-encoded); the first Faults.throttled_requests requests marked with the faulted state
  are answered with the service's own throttling error, never reaching moto: EC2
  `RequestLimitExceeded` (HTTP 503), STS `Throttling` (400), the JSON services (SSM, EventBridge,
  KMS, Step Functions) `ThrottlingException` (400), EBS direct `RequestThrottledException` (400,
  Reason ACCOUNT_THROTTLED, as botocore's ebs model declares it), S3 `SlowDown` (503).
- EBS direct requests (signed for `ebs`) but ListChangedBlocks are answered by ebs_direct.py,
  the EBS emulator over the twin's EC2 snapshot records and sparse files (after the throttle
  check, so `throttle@STATE` reaches them; moto's own `ebs` backend, blocks in memory, is left
  with ListChangedBlocks only).
- S3 requests and presigned URLs signed with Signature Version 2 are refused (s3_twin.py).
- `/_twin/settle`: the runner POSTs it after a Wait that lasts 30 s or more in AWS: the
  eventual-consistency lags of consistency.py end (they are counted in calls otherwise).
- `/_twin/map-run`: the runner POSTs each Distributed Map run as it starts and ends (map_runs.py
  answers ListMapRuns and DescribeMapRun from them).
- `/_twin/child-execution`: the runner POSTs each child it runs in its own process (a launch
  attempt) as it starts and ends (stepfunctions_twin.child_execution: an execution of its own).
- `lost@STATE`: the runner POSTs `/_twin/lost` {"execution": name} when it enters the state; every
  instance tagged with that execution that is not terminated is terminated as by a Spot
  interruption (ec2_twin.interrupt_spot_instance).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote

from moto.ec2.models import ec2_backends

from devkit.ebs import wire

from . import ebs_direct, map_runs, s3_twin, stepfunctions_twin
from . import state as st
from .ec2_twin import interrupt_spot_instance

EXECUTION_TAG = "ebs-snapshot-compactor:execution"
_SERVICE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")

StartResponse = Callable[..., Any]


def service_of(environ: dict[str, Any]) -> str:
    """The SigV4 service of a request: from its Authorization header, or from the X-Amz-Credential
    of a presigned URL."""
    m = _SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if m:
        return m.group(1)
    presigned = s3_twin.presigned_credential(environ)
    return presigned[1] if presigned else ""


def throttling_response(service: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status line, headers, body) of the service's throttling answer."""
    request_id = str(uuid.uuid4())
    if service == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            "<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
            f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
        )
        return "503 Service Unavailable", [("Content-Type", "text/xml")], body.encode()
    if service == "sts":
        body = (
            "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>"
            f"<Message>Rate exceeded</Message></Error><RequestId>{request_id}</RequestId>"
            "</ErrorResponse>"
        )
        return "400 Bad Request", [("Content-Type", "text/xml")], body.encode()
    if service == "ebs":
        status, headers, answer = wire.error_response(
            wire.EbsError(
                400,
                "RequestThrottledException",
                "ACCOUNT_THROTTLED",
                "The request rate exceeds the limit for this account.",
            )
        )
        return wire.status_line(status), headers, answer
    if service == "s3":
        return s3_twin.throttling_response()
    body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
    return (
        "400 Bad Request",
        [("Content-Type", "application/x-amz-json-1.1"), ("x-amzn-RequestId", request_id)],
        body.encode(),
    )


def _send(
    start_response: StartResponse, status: str, headers: list[tuple[str, str]], body: bytes
) -> list[bytes]:
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


def interrupt_execution_instances(account: str, region: str, execution: str) -> list[str]:
    backend = ec2_backends[account][region]
    hit = []
    for reservation in backend.all_reservations():
        for instance in reservation.instances:
            tags = backend.tags.get(instance.id, {})
            if tags.get(EXECUTION_TAG) == execution and instance.state != "terminated":
                interrupt_spot_instance(backend, instance.id)
                hit.append(instance.id)
    return hit


def settle(emu: st.EmulatorState) -> int:
    """Time has passed (a long Wait): EC2's eventual consistency has caught up."""
    with emu.lock:
        pending = sum(1 for v in emu.tag_lag.values() if v > 0)
        pending += sum(1 for v in emu.deregister_settling.values() if v > 0)
        emu.tag_lag.clear()
        emu.deregister_settling.clear()
    return pending


class Middleware:
    """WSGI wrapper around moto's server application."""

    def __init__(self, app: Any, account: str, region: str) -> None:
        self.app = app
        self.account = account
        self.region = region

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        emu = st.ACTIVE
        if environ.get("PATH_INFO", "").startswith("/_twin/"):
            return self._control(environ, start_response)
        marked = environ.get("HTTP_X_TWIN_STATE")
        if emu is not None and marked and unquote(marked) in emu.faults.throttle_states:
            state = unquote(marked)
            with emu.lock:
                served = emu.throttled_served.get(state, 0)
                throttle = served < emu.faults.throttled_requests
                if throttle:
                    emu.throttled_served[state] = served + 1
            if throttle:
                return _send(start_response, *throttling_response(service_of(environ)))
        if emu is not None:
            service = service_of(environ)
            if service == "ebs":
                direct = ebs_direct.answer(environ, self.account, self.region)
                if direct is not None:
                    return _send(start_response, *direct)
            if (service in ("s3", "")) and s3_twin.is_sigv2(environ):
                return _send(start_response, *s3_twin.sigv2_refusal())
            if service == "s3":
                caller = environ.get("HTTP_X_TWIN_CALLER")
                refusal = s3_twin.missing_key_refusal(
                    environ, self.account, caller, emu.s3_listable
                )
                if refusal is not None:
                    return _send(start_response, *refusal)
        return self.app(environ, start_response)  # type: ignore[no-any-return]

    def _control(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length) or b"{}")
        emu = st.ACTIVE
        if environ["PATH_INFO"] == "/_twin/lost" and emu is not None:
            hit = interrupt_execution_instances(self.account, self.region, request["execution"])
            with emu.lock:
                emu.lost_instances.extend(hit)
            answer: dict[str, Any] = {"interrupted": hit}
            status = "200 OK"
        elif environ["PATH_INFO"] == "/_twin/settle" and emu is not None:
            answer, status = {"settled": settle(emu)}, "200 OK"
        elif environ["PATH_INFO"] == "/_twin/child-execution" and emu is not None:
            recorded = stepfunctions_twin.child_execution(self.account, self.region, request)
            answer, status = {"recorded": recorded}, "200 OK"
        elif environ["PATH_INFO"] == "/_twin/map-run" and emu is not None:
            map_runs.record(emu, request)
            answer, status = {"recorded": request.get("mapRunArn")}, "200 OK"
        else:
            answer, status = {"error": f"no twin control {environ['PATH_INFO']}"}, "404 Not Found"
        body = json.dumps(answer).encode()
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]
