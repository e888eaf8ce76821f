"""The transfer instance's role credentials as EC2 serves them, for FAULT=credentials-near-expiry.

By default the twin hands the instance's programs environment credentials that never expire
(ssm_twin.instance_env). With Faults.ebs_credentials_seconds > 0 the instance gets no
environment credentials but AWS_EC2_METADATA_SERVICE_ENDPOINT, this IMDSv2 stand-in under the
emulator's URL (/_twin/imds/<instance id>), which answers every fetch of the role's credentials
with a new set that expires that many seconds later (EC2 may hand out role credentials with less
than 5 minutes left), and an EBS direct request signed with a set past its Expiration is answered
403 ExpiredTokenException, as AWS does, before it reaches the APIs (or the IAM recorder). The data
plane must refresh in time (sparsecopy/credentials.py) and retry a request refused so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from ..iam.recorder import INSTANCE_CALLER
from . import state as st

PREFIX = "/_twin/imds/"
ROLE_NAME = "twin-transfer-instance-role"
SECRET = "twin-instance-role-secret"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def endpoint(emu: st.EmulatorState, instance_id: str) -> str:
    """The instance's AWS_EC2_METADATA_SERVICE_ENDPOINT."""
    return f"{emu.endpoint}{PREFIX}{instance_id}"


def _issue(emu: st.EmulatorState, instance_id: str) -> dict[str, str]:
    """A new set of the instance's role credentials, valid ebs_credentials_seconds from now."""
    token = secrets.token_hex(16)
    digest = hashlib.sha256(f"instance-role:{instance_id}:{token}".encode()).digest()
    key = "ASIATWIN" + base64.b32encode(digest).decode()[:12]
    expires = time.time() + emu.faults.ebs_credentials_seconds
    with emu.lock:
        emu.access_keys[key] = INSTANCE_CALLER
        emu.instance_keys[key] = instance_id
        emu.session_expiry[token] = expires
        emu.credentials_issued += 1
    stamp = datetime.fromtimestamp(expires, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key,
            "SecretAccessKey": SECRET, "Token": token, "Expiration": stamp}  # fmt: skip


def _answer(start_response: StartResponse, status: str, body: str,
            headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:  # fmt: skip
    data = body.encode()
    start_response(status, [("Content-Length", str(len(data))), *headers])
    return [data]


def _metadata(emu: st.EmulatorState, environ: dict[str, Any], start: StartResponse) -> list[bytes]:
    """IMDSv2: PUT /latest/api/token, then the role's name and its credentials (with the token)."""
    instance_id, _, path = environ.get("PATH_INFO", "")[len(PREFIX) :].partition("/")
    path = "/" + path
    if environ.get("REQUEST_METHOD") == "PUT" and path == "/latest/api/token":
        return _answer(start, "200 OK", secrets.token_hex(16))
    if not environ.get("HTTP_X_AWS_EC2_METADATA_TOKEN"):
        return _answer(start, "401 Unauthorized", "")
    roles = "/latest/meta-data/iam/security-credentials/"
    if path == roles:
        return _answer(start, "200 OK", ROLE_NAME)
    if path == roles + ROLE_NAME:
        return _answer(start, "200 OK", json.dumps(_issue(emu, instance_id)))
    return _answer(start, "404 Not Found", "")


def _expired(emu: st.EmulatorState, environ: dict[str, Any]) -> bool:
    token = environ.get("HTTP_X_AMZ_SECURITY_TOKEN")
    expires = emu.session_expiry.get(token) if token else None
    return expires is not None and time.time() >= expires


def wrap(app: Any, emu: st.EmulatorState) -> Any:
    """The emulator's WSGI app with the metadata stand-in and the expired-token refusal."""

    def metadata_app(environ: dict[str, Any], start_response: StartResponse) -> Any:
        if environ.get("PATH_INFO", "").startswith(PREFIX):
            return _metadata(emu, environ, start_response)
        if _expired(emu, environ):
            with emu.lock:
                emu.expired_tokens_refused += 1
            body = json.dumps({"message": "The security token included in the request is expired"})
            headers = [("Content-Type", "application/json"),
                       ("x-amzn-ErrorType", "ExpiredTokenException")]  # fmt: skip
            return _answer(start_response, "403 Forbidden", body, headers)
        return app(environ, start_response)

    return metadata_app
