"""StartSnapshot, PutSnapshotBlock and CompleteSnapshot of the EBS emulator (the behaviour is
described in devkit/ebs/api.py, the quirks in devkit/ebs/quirks.py)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any

from . import wire
from .quirks import DirectSnapshot
from .store import NewSnapshot
from .wire import (
    BLOCK,
    Dropped,
    EbsError,
    Request,
    Response,
    block_index,
    default_kms_key_arn,
    int_value,
    json_response,
    linear_checksum,
    not_found,
    validation,
)

if TYPE_CHECKING:
    from .api import Emulator

MAX_VOLUME_GIB = 65_536
TIMEOUT_MIN, TIMEOUT_MAX, TIMEOUT_DEFAULT = 10, 4320, 60
MAX_TAGS = 50


def _now() -> float:
    return wire.clock()  # read through the module: tests and twin/later.py move it on


# --- StartSnapshot -----------------------------------------------------------------------------


def _start_params(request: Request) -> dict[str, Any]:
    try:
        params: dict[str, Any] = json.loads(request.body or b"{}")
    except ValueError:
        raise validation("INVALID_PARAMETER_VALUE", "The request body is not JSON.") from None
    size = params.get("VolumeSize")
    if not isinstance(size, int) or not 1 <= size <= MAX_VOLUME_GIB:
        raise validation(
            "INVALID_VOLUME_SIZE",
            f"Volume size {size} GiB is invalid: it must be 1 to {MAX_VOLUME_GIB} GiB.",
        )
    timeout = params.get("Timeout", TIMEOUT_DEFAULT)
    if not isinstance(timeout, int) or not TIMEOUT_MIN <= timeout <= TIMEOUT_MAX:
        raise validation(
            "INVALID_PARAMETER_VALUE",
            f"Value '{timeout}' at 'timeout' failed to satisfy constraint: Member must have "
            f"value between {TIMEOUT_MIN} and {TIMEOUT_MAX}",
        )
    params["Timeout"] = timeout
    tags = params.get("Tags") or []
    if len(tags) > MAX_TAGS or any(str(t.get("Key", "")).startswith("aws:") for t in tags):
        raise validation(
            "INVALID_TAG", f"At most {MAX_TAGS} tags, none with a key starting with 'aws:'."
        )
    if params.get("KmsKeyArn") and params.get("Encrypted") is not True:
        raise validation(
            "INVALID_PARAMETER_VALUE", "KmsKeyArn can only be specified with Encrypted=true."
        )
    if params.get("ParentSnapshotId") and "Encrypted" in params:
        raise validation(
            "INVALID_PARAMETER_VALUE", "ParentSnapshotId and Encrypted cannot both be specified."
        )
    return params


def _fingerprint(params: dict[str, Any]) -> str:
    same = {k: v for k, v in params.items() if k != "ClientToken"}
    return hashlib.sha256(json.dumps(same, sort_keys=True).encode()).hexdigest()


def start(emu: Emulator, request: Request) -> Response:
    params = _start_params(request)
    token = params.get("ClientToken")
    writes = emu.writes
    with emu.lock:
        if token and token in writes.client_tokens:
            fingerprint, sid = writes.client_tokens[token]
            if fingerprint != _fingerprint(params):
                raise EbsError(
                    409,
                    "ConflictException",
                    None,
                    "The request uses the same client token as a previous, but non-identical "
                    "request.",
                )
            return json_response(201, writes.snapshots[sid].start_answer)
        _pending_quota(emu)
        direct = _new_snapshot(emu, params)
        if token:
            writes.client_tokens[token] = (_fingerprint(params), direct.snapshot_id)
        return json_response(201, direct.start_answer)


def _pending_quota(emu: Emulator) -> None:
    """At most Quirks.pending_snapshots snapshots pending in the account (AWS: 100)."""
    emu.settle()
    pending = emu.store.pending()
    limit = emu.quirks.pending_snapshots
    if limit and pending >= limit:
        raise EbsError(
            402,
            "ServiceQuotaExceededException",
            "DEPENDENCY_SERVICE_QUOTA_EXCEEDED",
            f"The account has {pending} pending snapshots: the limit is {limit}.",
        )


def _new_snapshot(emu: Emulator, params: dict[str, Any]) -> DirectSnapshot:
    size = int(params["VolumeSize"])
    parent_id = params.get("ParentSnapshotId")
    parent = emu.store.describe(parent_id) if parent_id else None
    if parent_id and parent is None:
        raise not_found(parent_id)
    if parent is not None and parent.status != "completed":
        raise validation(
            "INVALID_SNAPSHOT_ID", f"The parent snapshot '{parent_id}' is {parent.status}."
        )
    if parent is not None and parent.size_gib > size:
        raise validation(
            "INVALID_VOLUME_SIZE",
            f"Volume size {size} GiB is smaller than the parent's {parent.size_gib} GiB.",
        )
    encrypted = bool(params.get("Encrypted")) or bool(parent is not None and parent.encrypted)
    kms = params.get("KmsKeyArn") or (parent.kms_key_id if parent is not None else None)
    if encrypted and not kms:
        kms = default_kms_key_arn(emu.store.account, emu.region)
    tags = {t["Key"]: t.get("Value", "") for t in params.get("Tags") or []}
    new = NewSnapshot(size, params.get("Description", ""), tags, encrypted, kms, parent_id)
    snapshot_id, started = emu.store.create(new)
    answer: dict[str, Any] = {
        "SnapshotId": snapshot_id,
        "OwnerId": emu.store.account,
        "Status": "pending",
        "StartTime": started,
        "VolumeSize": size,
        "BlockSize": BLOCK,
    }
    for key in ("Description", "Tags", "ParentSnapshotId"):
        if params.get(key):
            answer[key] = params[key]
    if kms:
        answer["KmsKeyArn"] = kms
    direct = DirectSnapshot(snapshot_id, size, int(params["Timeout"]), _now(), start_answer=answer)
    emu.writes.snapshots[snapshot_id] = direct
    emu.writes.started.append(snapshot_id)
    return direct


# --- PutSnapshotBlock --------------------------------------------------------------------------


def _put_faults(emu: Emulator, snapshot_id: str) -> None:
    """Throttling, the quota and the injected failures of one put; called with the lock held."""
    quirks, writes = emu.quirks, emu.writes
    if quirks.throttle_all or writes.puts_throttled < quirks.throttled_puts:
        writes.puts_throttled += 1
        raise EbsError(
            400,
            "RequestThrottledException",
            "RESOURCE_LEVEL_THROTTLE",
            "The request rate for this snapshot exceeds the limit.",
        )
    _quota(emu, snapshot_id)
    if writes.puts_failed < quirks.failed_puts:
        writes.puts_failed += 1
        raise EbsError(500, "InternalServerException", None, "An internal error has occurred.")
    if writes.puts_dropped < quirks.dropped_puts:
        writes.puts_dropped += 1
        raise Dropped()


def _quota(emu: Emulator, snapshot_id: str) -> None:
    """PutSnapshotBlock's quota: at most Quirks.snapshot_puts_per_second puts admitted in any
    second for one snapshot, Quirks.account_puts_per_second for the account (every client of
    this emulator); beyond it RequestThrottledException."""
    now = time.monotonic()
    writes, quirks = emu.writes, emu.quirks
    mine = writes.snapshot_puts.setdefault(snapshot_id, deque())
    for window in (writes.account_puts, mine):
        while window and window[0] <= now - 1.0:
            window.popleft()
    for window, limit, reason, scope in (
        (writes.account_puts, quirks.account_puts_per_second, "ACCOUNT_THROTTLED", "account"),
        (mine, quirks.snapshot_puts_per_second, "RESOURCE_LEVEL_THROTTLE", "snapshot"),
    ):
        if limit and len(window) >= limit:
            writes.puts_over_quota += 1
            raise EbsError(
                400,
                "RequestThrottledException",
                reason,
                f"The PutSnapshotBlock rate exceeds the limit of {limit} per second for this "
                f"{scope}.",
            )
    writes.account_puts.append(now)
    mine.append(now)


def _put_checks(request: Request, data: bytes) -> bytes:
    """The raw SHA-256 digest of a put's data after the header checks (raises EbsError)."""
    length = int_value(request.header("x-amz-Data-Length"), "x-amz-Data-Length")
    if length != BLOCK:
        raise validation(
            "INVALID_PARAMETER_VALUE",
            f"DataLength {length} is not supported: the only supported size is {BLOCK} bytes.",
        )
    if len(data) != length:
        raise validation("INVALID_PARAMETER_VALUE", "Failed to read block data")
    if request.header("x-amz-Checksum-Algorithm") != "SHA256":
        raise validation("INVALID_PARAMETER_VALUE", "The only supported algorithm is SHA256.")
    progress = int_value(request.header("x-amz-Progress"), "x-amz-Progress")
    if progress is not None and not 0 <= progress <= 100:
        raise validation("INVALID_PARAMETER_VALUE", f"Progress {progress} is not 0 to 100.")
    digest = hashlib.sha256(data).digest()
    try:
        matches = base64.b64decode(request.header("x-amz-Checksum") or "", validate=True) == digest
    except binascii.Error:
        matches = False
    if not matches:
        raise validation(
            "INVALID_PARAMETER_VALUE",
            "The checksum of the block data does not match the x-amz-Checksum header.",
        )
    return digest


def _arrived(emu: Emulator, snapshot_id: str, raw_index: str, data: bytes) -> tuple[int, bytes]:
    """The block index and the data as EBS received them; called with the lock held."""
    quirks, writes = emu.quirks, emu.writes
    direct = emu.open_snapshot(snapshot_id)
    emu.visible(direct)
    index = block_index(raw_index, direct.blocks())
    if writes.transient_served < quirks.transient_put_failures:
        writes.transient_served += 1  # nanovms/ops#1268: the same put succeeds later
        raise validation("INVALID_PARAMETER_VALUE", "Failed to read block data")
    corrupt = writes.puts_corrupted < quirks.corrupt_puts or index in quirks.corrupt_blocks
    if data and corrupt:
        writes.puts_corrupted += 1  # corrupted in transit: the checksum cannot match
        data = bytes([data[0] ^ 0xFF]) + data[1:]
    return index, data


def put(emu: Emulator, request: Request, snapshot_id: str, raw_index: str) -> Response:
    with emu.lock:
        _put_faults(emu, snapshot_id)
        index, data = _arrived(emu, snapshot_id, raw_index, request.body)
    digest = _put_checks(request, data)
    with emu.lock:
        direct = emu.open_snapshot(snapshot_id)  # completed or timed out meanwhile?
        if direct.sealed:
            raise validation(
                "INVALID_SNAPSHOT_ID",
                f"The snapshot '{snapshot_id}' has been completed: no more blocks can be written.",
            )
        emu.store.write(snapshot_id, index, data)
        direct.digests[index] = digest
        direct.last_activity = _now()
        emu.writes.puts_accepted += 1
        progress = int_value(request.header("x-amz-Progress"), "x-amz-Progress")
        emu.store.progress(snapshot_id, progress or 0)
    headers = [
        ("x-amz-Checksum", base64.b64encode(digest).decode()),
        ("x-amz-Checksum-Algorithm", "SHA256"),
        ("x-amzn-RequestId", str(uuid.uuid4())),
    ]
    return 201, headers, b""


# --- CompleteSnapshot --------------------------------------------------------------------------


def _complete_checks(request: Request, direct: DirectSnapshot, strict: bool) -> None:
    count = int_value(request.header("x-amz-ChangedBlocksCount"), "x-amz-ChangedBlocksCount")
    if count is None or count != len(direct.digests):
        raise validation(
            "INVALID_PARAMETER_VALUE",
            f"ChangedBlocksCount {count} does not match the {len(direct.digests)} blocks written.",
        )
    checksum = request.header("x-amz-Checksum")
    if checksum is None:
        return
    if count == 0 and strict:
        raise validation(
            "INVALID_PARAMETER_VALUE", "A checksum was given but no blocks were written."
        )
    if request.header("x-amz-Checksum-Algorithm") != "SHA256":
        raise validation("INVALID_PARAMETER_VALUE", "The only supported algorithm is SHA256.")
    if request.header("x-amz-Checksum-Aggregation-Method") != "LINEAR":
        raise validation(
            "INVALID_PARAMETER_VALUE", "The only supported aggregation method is LINEAR."
        )
    if checksum != linear_checksum(direct.digests):
        raise validation(
            "INVALID_PARAMETER_VALUE",
            "The aggregated checksum does not match the checksums of the blocks written.",
        )


def complete(emu: Emulator, request: Request, snapshot_id: str) -> Response:
    quirks, writes = emu.quirks, emu.writes
    with emu.lock:
        direct = writes.snapshots.get(snapshot_id)
        described = emu.store.describe(snapshot_id)
        if direct is not None and direct.sealed and described is not None:
            if not quirks.strict_completion:
                return json_response(202, {"Status": described.status})
            writes.completions_refused += 1
            raise validation(
                "INVALID_SNAPSHOT_ID",
                f"The snapshot '{snapshot_id}' has already been completed ({described.status}).",
            )
        direct = emu.open_snapshot(snapshot_id)
        emu.visible(direct)
        _complete_checks(request, direct, quirks.strict_completion)
        direct.sealed = True
        direct.last_activity = _now()
        emu.store.sealing(snapshot_id)
        if writes.completions_lost < quirks.lost_completions:
            writes.completions_lost += 1  # sealing; the answer never reaches the client
            raise EbsError(500, "InternalServerException", None, "An internal error has occurred.")
    return json_response(202, {"Status": "pending"})
