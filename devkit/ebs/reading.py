"""ListSnapshotBlocks and GetSnapshotBlock of the EBS emulator (the behaviour is described in
devkit/ebs/api.py)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from . import wire
from .wire import (
    BLOCK,
    BLOCK_TOKEN_SECONDS,
    Request,
    Response,
    b64_sha256,
    block_index,
    block_token,
    int_value,
    json_response,
    next_token,
    not_found,
    read_token,
    validation,
)

if TYPE_CHECKING:
    from .api import Emulator

MAX_RESULTS_MIN, MAX_RESULTS_MAX = 100, 10_000
# AWS documents no default page: the smallest makes a client that reads one page without
# following NextToken lose blocks
DEFAULT_MAX_RESULTS = MAX_RESULTS_MIN


def _completed(emu: Emulator, snapshot_id: str) -> int:
    """The volume size (GiB) of a completed snapshot the read calls may see (raises EbsError)."""
    hidden = emu.hidden_while_sealing(snapshot_id)
    described = emu.store.describe(snapshot_id)
    if described is None or hidden:
        raise not_found(snapshot_id)
    if described.status != "completed":
        raise validation(
            "INVALID_SNAPSHOT_ID",
            f"The snapshot '{snapshot_id}' is in state {described.status}; only completed "
            "snapshots can be accessed with the EBS direct APIs.",
        )
    return described.size_gib


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


def _page_limit(query: dict[str, list[str]]) -> tuple[int, int | None]:
    """(MaxResults to serve, StartingBlockIndex) of a ListSnapshotBlocks request."""
    max_results = int_value(_first(query, "maxResults"), "maxResults")
    if max_results is not None and max_results > MAX_RESULTS_MAX:
        raise validation(
            "INVALID_PARAMETER_VALUE",
            f"Value '{max_results}' at 'maxResults' failed to satisfy constraint: Member must "
            f"have value less than or equal to {MAX_RESULTS_MAX}",
        )
    starting = int_value(_first(query, "startingBlockIndex"), "startingBlockIndex")
    if starting is not None and starting < 0:
        raise validation(
            "INVALID_PARAMETER_VALUE",
            f"Value '{starting}' at 'startingBlockIndex' failed to satisfy constraint: Member "
            "must have value greater than or equal to 0",
        )
    limit = DEFAULT_MAX_RESULTS if max_results is None else max(max_results, MAX_RESULTS_MIN)
    return limit, starting


def list_blocks(emu: Emulator, request: Request, snapshot_id: str) -> Response:
    query = parse_qs(request.query, keep_blank_values=True)
    limit, starting = _page_limit(query)
    token = (query.get("pageToken") or [""])[0]
    now = wire.clock()
    with emu.lock:
        size = _completed(emu, snapshot_id)
        start = read_token(token, snapshot_id, now) if token else (starting or 0)
        blocks = [i for i in emu.store.written(snapshot_id) if i >= start][:limit]
    answer: dict[str, Any] = {
        "Blocks": [{"BlockIndex": i, "BlockToken": block_token(snapshot_id, i)} for i in blocks],
        "ExpiryTime": float(int(now) + BLOCK_TOKEN_SECONDS),
        "VolumeSize": size,
        "BlockSize": BLOCK,
    }
    if len(blocks) == limit:
        answer["NextToken"] = next_token(snapshot_id, blocks[-1] + 1, now)
    return json_response(200, answer)


def get(emu: Emulator, request: Request, snapshot_id: str, raw_index: str) -> Response:
    token = (parse_qs(request.query, keep_blank_values=True).get("blockToken") or [""])[0]
    with emu.lock:
        index = block_index(raw_index, _completed(emu, snapshot_id) * 2048)
        held = emu.store.holds(snapshot_id, index)
    if not held:
        # A block the snapshot does not hold has no token: ListSnapshotBlocks lists "only block
        # indexes and tokens that have data written to them" (EBS direct APIs FAQ) and
        # GetSnapshotBlock takes "the BlockToken ... by running ListChangedBlocks or
        # ListSnapshotBlocks" (botocore ebs 2019-11-02 model); INVALID_BLOCK_TOKEN is the model's
        # reason for a token that names no block.
        raise validation(
            "INVALID_BLOCK_TOKEN",
            f"The snapshot '{snapshot_id}' holds no block at index {index}: a block "
            "ListSnapshotBlocks does not list cannot be read (it reads as zeros or, on an "
            "encrypted volume, as random bytes).",
        )
    if token != block_token(snapshot_id, index):
        raise validation("INVALID_BLOCK_TOKEN", "The block token is invalid.")
    data = emu.store.read(snapshot_id, index)
    headers = [
        ("Content-Type", "application/octet-stream"),
        ("x-amz-Data-Length", str(len(data))),
        ("x-amz-Checksum", b64_sha256(data)),
        ("x-amz-Checksum-Algorithm", "SHA256"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
    ]
    return 200, headers, data
