"""A local stand-in of the EBS direct write APIs (and the two read calls), in AWS's wire format
(botocore's model ebs 2019-11-02, rest-json), for sparsecopy's tests and the benchmark.

    with StandIn(latency=0.1, max_concurrency=100) as ebs:
        os.environ["AWS_ENDPOINT_URL_EBS"] = ebs.url

Calls: StartSnapshot (POST /snapshots), PutSnapshotBlock (PUT /snapshots/ID/blocks/N),
CompleteSnapshot (POST /snapshots/completion/ID), ListSnapshotBlocks (GET /snapshots/ID/blocks),
GetSnapshotBlock (GET /snapshots/ID/blocks/N?blockToken=T). Every request sleeps ``latency``
seconds while it counts as in flight; above ``max_concurrency`` requests in flight the answer is
ConcurrentLimitExceededException (400). Faults: ``throttle_puts`` (the next N puts answer
RequestThrottledException), ``throttle_all`` (every put does), ``fail_puts`` (the next N puts
answer InternalServerException, 500), ``drop_puts`` (the next N puts get the connection
closed without an answer), ``corrupt_blocks`` (the server sees those blocks' data
altered, so their checksum never matches). Checks: SigV4 (with botocore, when ``credentials``
are given), the block checksum, DataLength, the block index against VolumeSize, the changed
block count and the LINEAR aggregated checksum at completion (mismatch: ValidationException, the
snapshot stays pending), no put to a completed snapshot. CompleteSnapshot answers Status
`pending` (AWS: it starts an asynchronous seal); the snapshot reads as `completed`, and the read
calls accept it, ``seal_seconds`` later. Blocks are kept in memory."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

BLOCK = 524288
_SIGNING = threading.Lock()


class ApiFault(Exception):
    def __init__(self, status: int, code: str, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.reason = status, code, message, reason


def digest_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def linear_checksum(blocks: dict[int, bytes]) -> str:
    """What EBS compares CompleteSnapshot's checksum with: SHA-256 over the raw SHA-256 digests
    of the written blocks in ascending block index, base64 (as awslabs/coldsnap computes it)."""
    joined = b"".join(hashlib.sha256(blocks[i]).digest() for i in sorted(blocks))
    return base64.b64encode(hashlib.sha256(joined).digest()).decode()


@dataclass
class Snapshot:
    snapshot_id: str
    volume_size: int
    spec: dict[str, Any]
    status: str = "pending"
    blocks: dict[int, bytes] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    sealed_at: float | None = None  # CompleteSnapshot accepted: `completed` from then on

    @property
    def open(self) -> bool:
        return self.status == "pending" and self.sealed_at is None

    def advance(self) -> Snapshot:
        if self.sealed_at is not None and time.monotonic() >= self.sealed_at:
            self.status = "completed"
        return self


@dataclass
class Stats:
    requests: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    rejected: int = 0
    throttled: int = 0


class StandIn:
    """The server (a ThreadingHTTPServer in a daemon thread) and its state."""

    def __init__(
        self,
        latency: float = 0.0,
        max_concurrency: int = 1000,
        seal_seconds: float = 0.0,
        credentials: tuple[str, str] | None = None,
        region: str = "us-east-1",
    ) -> None:
        self.latency, self.max_concurrency = latency, max_concurrency
        self.seal_seconds = seal_seconds
        self.credentials, self.region = credentials, region
        self.snapshots: dict[str, Snapshot] = {}
        self.tokens: dict[str, str] = {}  # ClientToken -> snapshot id
        self.stats = Stats()
        self.throttle_puts = 0
        self.throttle_all = False
        self.fail_puts = 0
        self.drop_puts = 0
        self.corrupt_blocks: set[int] = set()
        self.expired_tokens: set[str] = set()  # session tokens answered 403 ExpiredTokenException
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ bookkeeping

    def enter(self, op: str) -> None:
        with self.lock:
            self.stats.requests[op] = self.stats.requests.get(op, 0) + 1
            if self.stats.in_flight >= self.max_concurrency:
                self.stats.rejected += 1
                raise ApiFault(400, "ConcurrentLimitExceededException", "too many requests")
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.stats.in_flight -= 1

    def snapshot(self, snapshot_id: str) -> Snapshot:
        found = self.snapshots.get(snapshot_id)
        if found is None:
            raise ApiFault(404, "ResourceNotFoundException", snapshot_id, "SNAPSHOT_NOT_FOUND")
        found.advance()
        return found

    # ------------------------------------------------------------------ the calls

    def start(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        spec = json.loads(body or b"{}")
        size = spec.get("VolumeSize")
        if not isinstance(size, int) or not 1 <= size <= 65536:
            raise ApiFault(400, "ValidationException", "VolumeSize", "INVALID_VOLUME_SIZE")
        timeout = spec.get("Timeout", 60)
        if not 10 <= timeout <= 4320:
            raise ApiFault(400, "ValidationException", "Timeout", "INVALID_PARAMETER_VALUE")
        with self.lock:
            token = spec.get("ClientToken")
            known = self.tokens.get(token) if token else None
            snap = self.snapshots.get(known or "")
            if snap is None:
                snap = Snapshot(f"snap-{uuid.uuid4().hex[:17]}", size, spec)
                self.snapshots[snap.snapshot_id] = snap
                if token:
                    self.tokens[token] = snap.snapshot_id
        answer = {
            "SnapshotId": snap.snapshot_id,
            "OwnerId": "111122223333",
            "Status": snap.status,
            "StartTime": time.time(),
            "VolumeSize": size,
            "BlockSize": BLOCK,
            "Tags": spec.get("Tags", []),
            "Description": spec.get("Description", ""),
        }
        if spec.get("KmsKeyArn"):
            answer["KmsKeyArn"] = spec["KmsKeyArn"]
        return 201, {}, json.dumps(answer).encode()

    def _put_faults(self) -> None:
        with self.lock:
            if self.throttle_all or self.throttle_puts > 0:
                self.throttle_puts = max(self.throttle_puts - 1, 0)
                self.stats.throttled += 1
                raise ApiFault(
                    400, "RequestThrottledException", "slow down", "RESOURCE_LEVEL_THROTTLE"
                )
            if self.fail_puts > 0:
                self.fail_puts -= 1
                raise ApiFault(500, "InternalServerException", "try again")
            if self.drop_puts > 0:
                self.drop_puts -= 1
                raise ApiFault(0, "", "connection dropped")  # the handler closes, no answer

    def put(
        self, snap: Snapshot, index: int, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        self._put_faults()
        if not snap.open:
            raise ApiFault(400, "ValidationException", f"{snap.snapshot_id} is not open")
        if not 0 <= index < snap.volume_size * 2048:
            raise ApiFault(400, "ValidationException", f"block {index}", "INVALID_BLOCK")
        if headers.get("x-amz-Data-Length") != str(BLOCK) or len(body) != BLOCK:
            raise ApiFault(400, "ValidationException", "DataLength must be 524288")
        if headers.get("x-amz-Checksum-Algorithm") != "SHA256":
            raise ApiFault(400, "ValidationException", "ChecksumAlgorithm must be SHA256")
        seen = bytes([body[0] ^ 0xFF]) + body[1:] if index in self.corrupt_blocks else body
        if digest_b64(seen) != headers.get("x-amz-Checksum"):
            raise ApiFault(
                400, "ValidationException", "The checksum of the block data does not match"
            )
        with self.lock:
            snap.blocks[index] = seen
        reply = {"x-amz-Checksum": digest_b64(seen), "x-amz-Checksum-Algorithm": "SHA256"}
        return 201, reply, b""

    def complete(self, snap: Snapshot, headers: Any) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            if not snap.open:
                raise ApiFault(400, "ValidationException", f"{snap.snapshot_id} is not open")
            count = headers.get("x-amz-ChangedBlocksCount")
            if count != str(len(snap.blocks)):
                raise ApiFault(
                    400,
                    "ValidationException",
                    f"ChangedBlocksCount {count}: {len(snap.blocks)} written",
                )
            checksum = headers.get("x-amz-Checksum")
            if checksum is not None:
                method = headers.get("x-amz-Checksum-Aggregation-Method")
                if method != "LINEAR" or checksum != linear_checksum(snap.blocks):
                    raise ApiFault(
                        400, "ValidationException", "The aggregated checksum does not match"
                    )
            snap.sealed_at = time.monotonic() + self.seal_seconds
        return 202, {}, json.dumps({"Status": "pending"}).encode()

    def list_blocks(self, snap: Snapshot) -> tuple[int, dict[str, str], bytes]:
        if snap.status != "completed":
            raise ApiFault(400, "ValidationException", f"{snap.snapshot_id} is {snap.status}")
        blocks = []
        for index in sorted(snap.blocks):
            token = base64.b64encode(uuid.uuid4().bytes).decode()
            snap.tokens[token] = index
            blocks.append({"BlockIndex": index, "BlockToken": token})
        expiry = time.time() + 3600
        doc = {
            "Blocks": blocks,
            "ExpiryTime": expiry,
            "VolumeSize": snap.volume_size,
            "BlockSize": BLOCK,
        }
        return 200, {}, json.dumps(doc).encode()

    def get_block(
        self, snap: Snapshot, index: int, token: str
    ) -> tuple[int, dict[str, str], bytes]:
        if snap.tokens.get(token) != index:
            raise ApiFault(400, "ValidationException", "block token", "INVALID_BLOCK_TOKEN")
        data = snap.blocks[index]
        reply = {
            "x-amz-Data-Length": str(len(data)),
            "x-amz-Checksum": digest_b64(data),
            "x-amz-Checksum-Algorithm": "SHA256",
        }
        return 200, reply, data

    def check_signature(self, method: str, path: str, headers: Any, body: bytes) -> None:
        """Re-sign the request with botocore at its X-Amz-Date: a different Authorization is
        the 403 AWS would give (InvalidSignatureException)."""
        if self.credentials is None:
            return
        from unittest import mock

        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        sent = headers.get("Authorization", "")
        signed = sent.split("SignedHeaders=")[-1].split(",")[0].split(";")
        keep = {k: v for k, v in headers.items() if k.lower() in signed}
        request = AWSRequest(
            method=method, url=f"http://{headers.get('Host')}{path}", headers=keep, data=body
        )
        if headers.get("X-Amz-Content-SHA256") == "UNSIGNED-PAYLOAD":
            request.context["payload_signing_enabled"] = False
        moment = datetime.datetime.strptime(headers.get("X-Amz-Date", ""), "%Y%m%dT%H%M%SZ")
        creds = Credentials(*self.credentials, headers.get("X-Amz-Security-Token"))
        # botocore reads the signing moment from a module global: patching it is only safe
        # one request at a time, and this server answers requests on many threads
        with _SIGNING, mock.patch("botocore.auth.get_current_datetime", return_value=moment):
            SigV4Auth(creds, "ebs", self.region).add_auth(request)
        if request.headers["Authorization"] != sent:
            raise ApiFault(403, "InvalidSignatureException", "signature does not match")

    def route(
        self, method: str, target: str, headers: Any, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(target)
        path = parts.path.strip("/").split("/")
        if headers.get("X-Amz-Security-Token") in self.expired_tokens:
            raise ApiFault(403, "ExpiredTokenException", "The security token has expired.")
        self.check_signature(method, target, headers, body)
        if method == "POST" and path == ["snapshots"]:
            return self.start(body)
        if method == "POST" and path[:2] == ["snapshots", "completion"] and len(path) == 3:
            return self.complete(self.snapshot(path[2]), headers)
        if len(path) >= 3 and path[0] == "snapshots" and path[2] == "blocks":
            snap = self.snapshot(path[1])
            if method == "GET" and len(path) == 3:
                return self.list_blocks(snap)
            if len(path) == 4 and method == "PUT":
                return self.put(snap, int(path[3]), headers, body)
            if len(path) == 4 and method == "GET":
                token = parse_qs(parts.query).get("blockToken", [""])[0]
                return self.get_block(snap, int(path[3]), token)
        raise ApiFault(404, "UnknownOperationException", f"{method} {parts.path}")


def _op_name(method: str, target: str) -> str:
    path = urlsplit(target).path
    if method == "PUT":
        return "PutSnapshotBlock"
    if "completion" in path:
        return "CompleteSnapshot"
    if method == "POST":
        return "StartSnapshot"
    return "GetSnapshotBlock" if path.rstrip("/").split("/")[-1].isdigit() else "ListSnapshotBlocks"


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                stand_in.enter(_op_name(self.command, self.path))
            except ApiFault as fault:
                return self._error(fault)
            try:
                time.sleep(stand_in.latency)
                status, headers, data = stand_in.route(self.command, self.path, self.headers, body)
            except ApiFault as fault:
                return self._error(fault)
            except (ValueError, KeyError) as exc:
                return self._error(ApiFault(400, "ValidationException", str(exc)))
            finally:
                stand_in.leave()
            self._send(
                status,
                headers,
                data,
                "application/json" if data[:1] == b"{" else "application/octet-stream",
            )

        def _error(self, fault: ApiFault) -> None:
            if fault.status == 0:  # drop_puts: close the connection without an answer
                self.close_connection = True
                return
            doc = {"message": fault.message, **({"Reason": fault.reason} if fault.reason else {})}
            self._send(
                fault.status,
                {"x-amzn-ErrorType": fault.code},
                json.dumps(doc).encode(),
                "application/json",
            )

        def _send(self, status: int, headers: dict[str, str], data: bytes, kind: str) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = _serve

    return Handler
