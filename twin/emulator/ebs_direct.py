"""EBS direct `ListSnapshotBlocks` for the twin's EC2 snapshots, answered from their sparse files.

moto has an `ebs` backend of its own, but it only knows snapshots made through the direct APIs
(StartSnapshot/PutSnapshotBlock); the twin's snapshots are EC2 snapshots kept as sparse files
(blockstore.py). The injection middleware hands `GET /snapshots/{id}/blocks` signed for `ebs` to
`answer()` here; a snapshot moto's own `ebs` backend knows stays with moto.

Which blocks are listed: a 512 KiB block is listed when any byte of it is data in the snapshot's
file per SEEK_DATA/SEEK_HOLE (devkit/chunks.written_chunks), not when it holds non-zero bytes. The
twin writes a snapshot file by copying the volume's allocated extents (devkit.chunks.copy_image), so
the allocation map is what was written, and a block written with zeros is still listed, as EBS
lists the blocks that were written ("it only returns block indexes and tokens that have data
written to them", EBS direct APIs FAQ).

AWS behaviour modelled (botocore's ebs service-2.json, the ListSnapshotBlocks API reference, the
EBS direct APIs FAQ):
- only `completed` snapshots are listed ("the snapshot can be accessed only if it has a completed
  status"); AWS documents no error code for the others: the twin answers ValidationException with
  Reason INVALID_SNAPSHOT_ID (the model's reason for a snapshot that cannot be used here);
- an unknown snapshot: ResourceNotFoundException (404), Reason SNAPSHOT_NOT_FOUND; an id that does
  not match `^snap-[0-9a-f]+$`: ValidationException INVALID_SNAPSHOT_ID;
- MaxResults: valid range 100..10000. Above 10000 (or not a number): ValidationException
  INVALID_PARAMETER_VALUE. Below 100 the FAQ says the API "will return at least 100 results": the
  twin serves 100 (boto3 itself refuses < 100 before sending). Without MaxResults the twin serves
  100 a page (AWS documents no default; the smallest page makes a client that reads one page
  without following NextToken lose blocks);
- NextToken is opaque (base64, at most 256 characters, bound to the snapshot), valid 60 minutes
  (FAQ); an expired, forged or other snapshot's token: ValidationException INVALID_PAGE_TOKEN.
  With NextToken, StartingBlockIndex is ignored. A full page always carries a NextToken, also when
  nothing follows (the next page is then empty, without token): the API "can return less blocks
  than MaxResults or an empty array of blocks";
- StartingBlockIndex: the list starts at that index or the next listed block after it;
- BlockSize 524288, VolumeSize in GiB, a BlockToken per block and ExpiryTime (block tokens live
  7 days) in every answer;
- throttling is the fault machinery's (injection.py answers RequestThrottledException, HTTP 400,
  as the model declares it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from .blockstore import EBS_BLOCK, written_chunks

MAX_RESULTS_MIN = 100
MAX_RESULTS_MAX = 10_000
DEFAULT_MAX_RESULTS = MAX_RESULTS_MIN
NEXT_TOKEN_SECONDS = 60 * 60
BLOCK_TOKEN_SECONDS = 7 * 24 * 60 * 60
_PATH = re.compile(r"^/snapshots/(?P<snapshot>[^/]+)/blocks/?$")
_SNAPSHOT_ID = re.compile(r"^snap-[0-9a-f]+$")
_TOKEN = re.compile(r"^[A-Za-z0-9+/=]{1,256}$")
_MAC_BYTES = 16

# The clock tokens are stamped and checked with (tests move it on).
clock: Callable[[], float] = time.time
# One secret per process: tokens are opaque and cannot be forged by clients.
_SECRET = secrets.token_bytes(32)


class EbsError(Exception):
    def __init__(self, status: str, code: str, reason: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.reason, self.message = status, code, reason, message


def validation(reason: str, message: str) -> EbsError:
    """A ValidationException (HTTP 400) with one of the model's ValidationExceptionReason codes."""
    return EbsError("400 Bad Request", "ValidationException", reason, message)


_validation = validation


def list_snapshot_blocks_path(environ: dict[str, Any]) -> str | None:
    """The snapshot id of a `GET /snapshots/{id}/blocks` request (None for any other request)."""
    if environ.get("REQUEST_METHOD") != "GET":
        return None
    m = _PATH.match(environ.get("PATH_INFO", ""))
    return unquote(m.group("snapshot")) if m else None


def error_response(error: EbsError) -> tuple[str, list[tuple[str, str]], bytes]:
    """A REST-JSON error as EBS sends it: the type in x-amzn-ErrorType, Message and Reason."""
    body: dict[str, Any] = {"Message": error.message}
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


# --- tokens -------------------------------------------------------------------------------------


def _mac(payload: bytes) -> bytes:
    return hmac.new(_SECRET, payload, hashlib.sha256).digest()[:_MAC_BYTES]


def next_token(snapshot_id: str, index: int, now: float) -> str:
    payload = f"{snapshot_id}:{index}:{int(now) + NEXT_TOKEN_SECONDS}".encode()
    return base64.b64encode(payload + _mac(payload)).decode()


def _read_token(token: str, snapshot_id: str, now: float) -> int:
    """The block index a NextToken resumes at; ValidationException INVALID_PAGE_TOKEN if the token
    is not one of ours for this snapshot or has expired."""
    invalid = _validation("INVALID_PAGE_TOKEN", "The pagination token is invalid.")
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
        raise _validation("INVALID_PAGE_TOKEN", "The pagination token has expired.")
    return int(index)


def block_token(snapshot_id: str, index: int) -> str:
    return base64.b64encode(_mac(f"block:{snapshot_id}:{index}".encode()) * 2).decode()


# --- the answer -----------------------------------------------------------------------------------


def _integer(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:
        raise _validation(
            "INVALID_PARAMETER_VALUE", f"Value '{values[0]}' at '{name}' is not a number."
        ) from None


def page(
    snapshot_id: str,
    status: str,
    volume_size_gib: int,
    path: Path,
    query_string: str,
    now: float,
) -> dict[str, Any]:
    """One ListSnapshotBlocks answer for a known EC2 snapshot (raises EbsError)."""
    query = parse_qs(query_string, keep_blank_values=True)
    max_results = _integer(query, "maxResults")
    if max_results is not None and max_results > MAX_RESULTS_MAX:
        raise _validation(
            "INVALID_PARAMETER_VALUE",
            f"Value '{max_results}' at 'maxResults' failed to satisfy constraint: Member must "
            f"have value less than or equal to {MAX_RESULTS_MAX}",
        )
    limit = DEFAULT_MAX_RESULTS if max_results is None else max(max_results, MAX_RESULTS_MIN)
    starting = _integer(query, "startingBlockIndex")
    if starting is not None and starting < 0:
        raise _validation(
            "INVALID_PARAMETER_VALUE",
            f"Value '{starting}' at 'startingBlockIndex' failed to satisfy constraint: Member "
            "must have value greater than or equal to 0",
        )
    token = (query.get("pageToken") or [""])[0]
    if status != "completed":
        raise _validation(
            "INVALID_SNAPSHOT_ID",
            f"The snapshot '{snapshot_id}' is in state {status}; only completed snapshots can be "
            "accessed with the EBS direct APIs.",
        )
    start = _read_token(token, snapshot_id, now) if token else (starting or 0)
    blocks = sorted(i for i in written_chunks(path) if i >= start)[:limit]
    answer: dict[str, Any] = {
        "Blocks": [{"BlockIndex": i, "BlockToken": block_token(snapshot_id, i)} for i in blocks],
        "ExpiryTime": float(int(now) + BLOCK_TOKEN_SECONDS),
        "VolumeSize": volume_size_gib,
        "BlockSize": EBS_BLOCK,
    }
    if len(blocks) == limit:
        answer["NextToken"] = next_token(snapshot_id, blocks[-1] + 1, now)
    return answer


def answer(
    snapshot_id: str, environ: dict[str, Any], lookup: Callable[[str], tuple[str, int, Path] | None]
) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status, headers, body) of one ListSnapshotBlocks request. `lookup(id)` gives the EC2
    snapshot's (state, volume size GiB, sparse file) or None when the twin has no such snapshot."""
    try:
        if not _SNAPSHOT_ID.match(snapshot_id) or len(snapshot_id) > 64:
            raise _validation("INVALID_SNAPSHOT_ID", f"The snapshot ID '{snapshot_id}' is invalid.")
        found = lookup(snapshot_id)
        if found is None:
            raise EbsError(
                "404 Not Found",
                "ResourceNotFoundException",
                "SNAPSHOT_NOT_FOUND",
                f"The snapshot '{snapshot_id}' does not exist.",
            )
        status, size, path = found
        body = page(snapshot_id, status, size, path, environ.get("QUERY_STRING", ""), clock())
    except EbsError as error:
        return error_response(error)
    return (
        "200 OK",
        [("Content-Type", "application/json"), ("x-amzn-RequestId", str(uuid.uuid4()))],
        json.dumps(body).encode(),
    )
