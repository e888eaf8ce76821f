"""The EBS direct APIs emulator: StartSnapshot, PutSnapshotBlock, CompleteSnapshot,
ListSnapshotBlocks and GetSnapshotBlock, over a pluggable Store (devkit/ebs/store.py). One
emulator for the data-plane tests and the bench (devkit/ebs/standin.py: its own HTTP server,
blocks in memory) and for the twin (twin/emulator/ebs_direct.py: behind moto's WSGI app, blocks
in the EC2 snapshots' sparse files).

AWS behaviour modelled (botocore's ebs service-2.json 2019-11-02; the API reference pages of the
five actions; the EBS user guide pages "Write snapshots", "Use EBS direct APIs checksums",
"Idempotency for StartSnapshot", "Encryption outcomes"; the EBS direct APIs FAQ):
- StartSnapshot (POST /snapshots, 201): VolumeSize GiB 1..65536 (else ValidationException
  INVALID_VOLUME_SIZE); Timeout minutes 10..4320, default 60; Encrypted without KmsKeyArn: the
  account's default EBS key; KmsKeyArn without Encrypted=true, or ParentSnapshotId with
  Encrypted: ValidationException (encryption outcomes table; the account has no encryption by
  default); ParentSnapshotId: the new snapshot starts with the parent's blocks (an unknown
  parent: ResourceNotFoundException SNAPSHOT_NOT_FOUND; one not `completed`:
  INVALID_SNAPSHOT_ID; a VolumeSize below the parent's: INVALID_VOLUME_SIZE). ClientToken: a
  retry with the same token and parameters answers the first call's snapshot; the same token
  with other parameters: ConflictException (409). Tags: at most 50, no `aws:` keys (INVALID_TAG).
  Quirks.pending_snapshots pending in the account: ServiceQuotaExceededException (402).
- PutSnapshotBlock (PUT /snapshots/{id}/blocks/{index}, 201): DataLength must be 524288 and equal
  the body's length; ChecksumAlgorithm SHA256; x-amz-Checksum (base64 SHA-256 of the body) must
  match, else ValidationException INVALID_PARAMETER_VALUE (AWS documents no reason code for a
  mismatch; that is the reason AWS answered for unreadable block data, nanovms/ops#1268) and
  nothing is written. BlockIndex beyond the volume: INVALID_BLOCK. Only an open (`pending`, not
  completed) direct snapshot takes puts, else INVALID_SNAPSHOT_ID. A block put again is
  overwritten (its last checksum counts). The answer carries EBS's own checksum headers.
- CompleteSnapshot (POST /snapshots/completion/{id}, 202): ChangedBlocksCount must equal the
  number of distinct blocks put; the optional aggregated Checksum (SHA256, LINEAR) must equal
  wire.linear_checksum; a mismatch leaves the snapshot open. Accepted: Status `pending`, the
  asynchronous seal begins (Store.sealing) and ends Quirks.seal_seconds later at the earliest
  (settle). Repeated on a sealed snapshot: its status, or refused with Quirks.strict_completion.
- Timeout: an open snapshot with no put or complete for Timeout minutes turns `error` when next
  seen (settle).
- ListSnapshotBlocks (GET /snapshots/{id}/blocks): completed snapshots only (ValidationException
  INVALID_SNAPSHOT_ID for others); the blocks the store holds, written zeros included;
  MaxResults 100..10000 (below 100 served as 100, above refused; default 100); NextToken opaque,
  bound to the snapshot, valid 60 minutes (else INVALID_PAGE_TOKEN), a full page always carries
  one; StartingBlockIndex ignored with a NextToken; BlockToken per block, ExpiryTime 7 days.
- GetSnapshotBlock (GET /snapshots/{id}/blocks/{index}?blockToken=): completed snapshots only; the
  token ListSnapshotBlocks hands out for that block (else INVALID_BLOCK_TOKEN; a block the
  snapshot does not hold has no token); the data with x-amz-Data-Length and its checksum.
- An unknown snapshot: ResourceNotFoundException (404) SNAPSHOT_NOT_FOUND; an id that does not
  match `^snap-[0-9a-f]+$`: INVALID_SNAPSHOT_ID.
- Every request: SigV4 checked when the emulator knows the credentials (InvalidSignatureException,
  403); an expired session token (Quirks.expired_tokens): ExpiredTokenException (403); more than
  Quirks.max_in_flight at once: ConcurrentLimitExceededException (400). AWS's other behaviours
  and the injected faults: devkit/ebs/quirks.py.
"""

from __future__ import annotations

import datetime
import re
import threading
import time

from . import reading, wire, writing
from .quirks import DirectSnapshot, DirectWrites, Quirks
from .store import Store
from .wire import EbsError, Request, Response, not_found, snapshot_id_of, validation

_BLOCK = r"^/snapshots/(?P<snapshot>[^/]+)/blocks/(?P<index>[^/]+)$"
_ROUTES = (
    ("POST", re.compile(r"^/snapshots/?$"), "StartSnapshot"),
    ("POST", re.compile(r"^/snapshots/completion/(?P<snapshot>[^/]+)$"), "CompleteSnapshot"),
    ("PUT", re.compile(_BLOCK), "PutSnapshotBlock"),
    ("GET", re.compile(_BLOCK), "GetSnapshotBlock"),
    ("GET", re.compile(r"^/snapshots/(?P<snapshot>[^/]+)/blocks/?$"), "ListSnapshotBlocks"),
)
# botocore reads the signing moment from a module global: one request re-signed at a time
_SIGNING = threading.Lock()


def operation(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    """Which call a request is, and its path parameters (None: not one this emulator answers)."""
    for verb, pattern, name in _ROUTES:
        m = pattern.match(path) if verb == method else None
        if m:
            return name, m.groupdict()
    return None


class Emulator:
    """One store, its quirks and its memory (DirectWrites). Cheap to make: the twin makes one
    per request around the DirectWrites it keeps, with the Quirks of its current Faults."""

    def __init__(
        self,
        store: Store,
        quirks: Quirks | None = None,
        writes: DirectWrites | None = None,
        region: str = "us-east-1",
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self.quirks = quirks or Quirks()
        self.writes = writes or DirectWrites()
        self.region = region
        self.credentials = credentials
        self.lock = store.lock

    # ------------------------------------------------------------------ the front door

    def handle(self, request: Request) -> Response | None:
        """(status, headers, body) of one request; None when it is not one of the five calls.
        Raises wire.Dropped when the connection is to close without an answer."""
        found = operation(request.method, request.path)
        if found is None:
            return None
        op, params = found
        try:
            self._admit(op, request)
            try:
                if self.quirks.latency:
                    time.sleep(self.quirks.latency)
                return self._dispatch(op, params, request)
            finally:
                with self.lock:
                    self.writes.in_flight -= 1
        except EbsError as error:
            return wire.error_response(error)

    def _admit(self, op: str, request: Request) -> None:
        token = request.header("x-amz-security-token")
        if token is not None and token in self.quirks.expired_tokens:
            raise EbsError(403, "ExpiredTokenException", None, "The security token has expired.")
        self.check_signature(request)
        writes, limit = self.writes, self.quirks.max_in_flight
        with self.lock:
            writes.requests[op] = writes.requests.get(op, 0) + 1
            if limit and writes.in_flight >= limit:
                writes.concurrent_limit_served += 1
                raise EbsError(
                    400,
                    "ConcurrentLimitExceededException",
                    None,
                    "You have reached the limit for concurrent API requests.",
                )
            writes.in_flight += 1
            writes.max_in_flight = max(writes.max_in_flight, writes.in_flight)

    def _dispatch(self, op: str, params: dict[str, str], request: Request) -> Response:
        if op == "StartSnapshot":
            return writing.start(self, request)
        snapshot_id = snapshot_id_of(params["snapshot"])
        if op == "PutSnapshotBlock":
            return writing.put(self, request, snapshot_id, params["index"])
        if op == "CompleteSnapshot":
            return writing.complete(self, request, snapshot_id)
        if op == "GetSnapshotBlock":
            return reading.get(self, request, snapshot_id, params["index"])
        return reading.list_blocks(self, request, snapshot_id)

    def check_signature(self, request: Request) -> None:
        """Re-sign the request with botocore at its X-Amz-Date: a different Authorization is
        the 403 AWS would give (InvalidSignatureException)."""
        if self.credentials is None:
            return
        from unittest import mock

        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        sent = request.header("authorization") or ""
        signed = sent.split("SignedHeaders=")[-1].split(",")[0].split(";")
        keep = {k: v for k, v in request.headers.items() if k.lower() in signed}
        target = request.path + (f"?{request.query}" if request.query else "")
        url = f"http://{request.header('host')}{target}"
        aws = AWSRequest(method=request.method, url=url, headers=keep, data=request.body)
        if request.header("x-amz-content-sha256") == "UNSIGNED-PAYLOAD":
            aws.context["payload_signing_enabled"] = False
        moment = datetime.datetime.strptime(request.header("x-amz-date") or "", "%Y%m%dT%H%M%SZ")
        creds = Credentials(*self.credentials, request.header("x-amz-security-token"))
        # patching botocore's module-global clock is only safe one request at a time, and the
        # servers answer requests on many threads
        with _SIGNING, mock.patch("botocore.auth.get_current_datetime", return_value=moment):
            SigV4Auth(creds, "ebs", self.region).add_auth(aws)
        if aws.headers["Authorization"] != sent:
            raise EbsError(403, "InvalidSignatureException", None, "signature does not match")

    # ------------------------------------------------------------------ time passes

    def settle(self, now: float | None = None) -> list[str]:
        """An open snapshot past its Timeout turns `error`; a sealing one is `completed` once
        Quirks.seal_seconds have passed since CompleteSnapshot. Returns the ids that turned
        `error`."""
        now = wire.clock() if now is None else now
        expired = []
        with self.lock:
            for sid, direct in self.writes.snapshots.items():
                described = self.store.describe(sid)
                if described is None or described.status != "pending":
                    continue
                if direct.sealed:
                    if now - direct.last_activity >= self.quirks.seal_seconds:
                        self.store.sealed(sid)
                elif now - direct.last_activity > direct.timeout_minutes * 60:
                    self.store.failed(
                        sid,
                        "The snapshot was not completed within its timeout of "
                        f"{direct.timeout_minutes} minutes after the last write.",
                    )
                    expired.append(sid)
        return expired

    def still_sealing(self, snapshot_id: str, now: float | None = None) -> bool:
        """A completed direct snapshot whose seal cannot have ended yet."""
        direct = self.writes.snapshots.get(snapshot_id)
        if direct is None or not direct.sealed:
            return False
        now = wire.clock() if now is None else now
        return now - direct.last_activity < self.quirks.seal_seconds

    def hidden_while_sealing(self, snapshot_id: str) -> bool:
        """Quirks.seal_not_found: a snapshot EBS is still sealing is not found by the read calls
        (coldsnap #141); counted when it is."""
        self.settle()
        with self.lock:
            direct = self.writes.snapshots.get(snapshot_id)
            described = self.store.describe(snapshot_id)
            hidden = (
                self.quirks.seal_not_found
                and direct is not None
                and direct.sealed
                and described is not None
                and described.status == "pending"
            )
            if hidden:
                self.writes.seal_not_found_served += 1
            return hidden

    def open_snapshot(self, snapshot_id: str) -> DirectSnapshot:
        """The open direct snapshot a put or a completion goes to (raises EbsError otherwise)."""
        self.settle()
        described = self.store.describe(snapshot_id)
        if described is None:
            raise not_found(snapshot_id)
        direct = self.writes.snapshots.get(snapshot_id)
        if direct is None or described.status != "pending":
            raise validation(
                "INVALID_SNAPSHOT_ID",
                f"The snapshot '{snapshot_id}' is in state {described.status}; only a pending "
                "snapshot started with StartSnapshot can be written.",
            )
        return direct

    def visible(self, direct: DirectSnapshot) -> None:
        """Quirks.not_found_requests: right after StartSnapshot, EBS does not find the snapshot
        yet (coldsnap #43: up to ~2 minutes); called with the lock held."""
        if direct.not_found_answers < self.quirks.not_found_requests:
            direct.not_found_answers += 1
            self.writes.not_found_served += 1
            raise not_found(direct.snapshot_id)
