"""The EBS direct APIs' wire format (botocore's model ebs 2019-11-02, rest-json) as the emulator
(devkit/ebs/api.py) speaks it: errors, opaque page and block tokens, checksums."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

BLOCK = 524_288  # the EBS snapshot block, 512 KiB
NEXT_TOKEN_SECONDS = 60 * 60  # a ListSnapshotBlocks NextToken lives 60 minutes (EBS FAQ)
BLOCK_TOKEN_SECONDS = 7 * 24 * 60 * 60
_SNAPSHOT_ID = re.compile(r"^snap-[0-9a-f]+$")
_TOKEN = re.compile(r"^[A-Za-z0-9+/=]{1,256}$")
_MAC_BYTES = 16

# The clock tokens and snapshot timeouts are read from (tests and twin/later.py move it on).
clock: Callable[[], float] = time.time
# One secret per process: tokens are opaque and cannot be forged by clients.
_SECRET = secrets.token_bytes(32)

Response = tuple[int, list[tuple[str, str]], bytes]


@dataclass(frozen=True)
class Request:
    """One HTTP request, whichever server received it; header names in lower case."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class EbsError(Exception):
    """An error answer: HTTP status, x-amzn-ErrorType, ValidationExceptionReason (or None)."""

    def __init__(self, status: int, code: str, reason: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.reason, self.message = status, code, reason, message


class Dropped(Exception):
    """The connection is closed without an answer (a request lost on the way back)."""


def validation(reason: str, message: str) -> EbsError:
    """A ValidationException (HTTP 400) with one of the model's ValidationExceptionReason codes."""
    return EbsError(400, "ValidationException", reason, message)


def not_found(snapshot_id: str) -> EbsError:
    return EbsError(
        404,
        "ResourceNotFoundException",
        "SNAPSHOT_NOT_FOUND",
        f"The snapshot '{snapshot_id}' does not exist.",
    )


def error_response(error: EbsError) -> Response:
    """A REST-JSON error as EBS sends it: the type in x-amzn-ErrorType, Message and Reason."""
    body: dict[str, str] = {"Message": error.message}
    if error.reason:
        body["Reason"] = error.reason
    return (
        error.status,
        [
            ("Content-Type", "application/json"),
            ("x-amzn-ErrorType", error.code),
            ("x-amzn-RequestId", str(uuid.uuid4())),
        ],
        json.dumps(body).encode(),
    )


def status_line(status: int) -> str:
    """`201 Created` for WSGI."""
    return f"{status} {HTTPStatus(status).phrase}"


def b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def linear_checksum(digests: Mapping[int, bytes]) -> str:
    """What EBS compares CompleteSnapshot's checksum with: SHA-256 over the raw SHA-256 digests
    of the written blocks in ascending block index, base64 (as awslabs/coldsnap's upload.rs
    computes it against AWS: raw digests, not their base64 text)."""
    joined = b"".join(digests[i] for i in sorted(digests))
    return base64.b64encode(hashlib.sha256(joined).digest()).decode()


def default_kms_key_arn(account: str, region: str) -> str:
    """The account's default EBS key (aws/ebs) as the emulator names it: a stable key id."""
    key = uuid.uuid5(uuid.NAMESPACE_URL, f"twin:{account}:{region}:aws/ebs")
    return f"arn:aws:kms:{region}:{account}:key/{key}"


def json_response(status: int, body: dict[str, Any]) -> Response:
    headers = [("Content-Type", "application/json"), ("x-amzn-RequestId", str(uuid.uuid4()))]
    return status, headers, json.dumps(body, default=str).encode()


def int_value(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise validation(
            "INVALID_PARAMETER_VALUE", f"Value '{value}' at '{name}' is not a number."
        ) from None


def snapshot_id_of(raw: str) -> str:
    snapshot_id = unquote(raw)
    if not _SNAPSHOT_ID.match(snapshot_id) or len(snapshot_id) > 64:
        raise validation("INVALID_SNAPSHOT_ID", f"The snapshot ID '{snapshot_id}' is invalid.")
    return snapshot_id


def block_index(raw: str, blocks: int) -> int:
    try:
        index = int(raw)
    except ValueError:
        raise validation("INVALID_BLOCK", f"The block index '{raw}' is invalid.") from None
    if not 0 <= index < blocks:
        raise validation(
            "INVALID_BLOCK",
            f"The block index {index} is out of range: the volume has {blocks} blocks.",
        )
    return index


# --- tokens -------------------------------------------------------------------------------------


def _mac(payload: bytes) -> bytes:
    return hmac.new(_SECRET, payload, hashlib.sha256).digest()[:_MAC_BYTES]


def next_token(snapshot_id: str, index: int, now: float) -> str:
    payload = f"{snapshot_id}:{index}:{int(now) + NEXT_TOKEN_SECONDS}".encode()
    return base64.b64encode(payload + _mac(payload)).decode()


def read_token(token: str, snapshot_id: str, now: float) -> int:
    """The block index a NextToken resumes at; ValidationException INVALID_PAGE_TOKEN if the token
    is not one of ours for this snapshot or has expired."""
    invalid = validation("INVALID_PAGE_TOKEN", "The pagination token is invalid.")
    if not _TOKEN.match(token):
        raise invalid
    try:
        raw = base64.b64decode(token, validate=True)
    except ValueError:
        raise invalid from None
    if len(raw) <= _MAC_BYTES:
        raise invalid
    payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(payload)):
        raise invalid
    sid, index, expires = payload.decode().rsplit(":", 2)
    if sid != snapshot_id:
        raise invalid
    if now > int(expires):
        raise validation("INVALID_PAGE_TOKEN", "The pagination token has expired.")
    return int(index)


def block_token(snapshot_id: str, index: int) -> str:
    return base64.b64encode(_mac(f"block:{snapshot_id}:{index}".encode()) * 2).decode()


WsgiResponse = tuple[str, list[tuple[str, str]], bytes]
