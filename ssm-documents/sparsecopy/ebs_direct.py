"""EBS direct APIs client (StartSnapshot, PutSnapshotBlock, CompleteSnapshot, ListSnapshotBlocks,
GetSnapshotBlock) over http.client, signed by sigv4.py: the standard library only.

Wire format from botocore's model (ebs 2019-11-02, rest-json). Retries with exponential backoff
and full jitter on throttling (RequestThrottledException, ThrottlingException,
ConcurrentLimitExceededException), 5xx and connection errors; a ValidationException that names
the checksum is retried at most CHECKSUM_RETRIES times (the block is read and hashed again).

Aggregated checksum (CompleteSnapshot, LINEAR): SHA-256 over the concatenated RAW 32-byte
SHA-256 digests of the written blocks in ascending block index, base64-encoded. The API text
("concatenate them to form a single string") is ambiguous; AWS's own uploader, awslabs/coldsnap
(src/upload.rs), concatenates the raw digests, and that is what this module does."""

import base64
import hashlib
import http.client
import json
import random
import threading
import time
from typing import Callable, NamedTuple, Optional, TypeVar
from urllib.parse import quote, urlsplit

from . import sigv4
from .credentials import CredentialSource
from .source_blocks import BLOCK_SIZE

BLOCK = BLOCK_SIZE  # the EBS snapshot block, 512 KiB
SERVICE = "ebs"
RETRYABLE_CODES = frozenset(
    (
        "RequestThrottledException",
        "ThrottlingException",
        "ConcurrentLimitExceededException",
        "InternalServerException",
    )
)
CHECKSUM_RETRIES = 2
T = TypeVar("T")


class ApiError(Exception):
    """An error answer (``code`` from x-amzn-ErrorType) or a transport error (``code`` "")."""

    def __init__(self, status: int, code: str, message: str, reason: str = "") -> None:
        super().__init__(
            f"{code or 'HTTP ' + str(status)}: {message}" + (f" ({reason})" if reason else "")
        )
        self.status, self.code, self.message, self.reason = status, code, message, reason

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES or self.status >= 500 or self.status == 0

    @property
    def checksum(self) -> bool:
        return self.code == "ValidationException" and "checksum" in self.message.lower()


class RetryPolicy(NamedTuple):
    attempts: int = 10
    base: float = 0.1  # seconds; attempt n sleeps uniform(0, min(cap, base * 2**n))
    cap: float = 20.0
    sleep: Callable[[float], None] = time.sleep


class Answer(NamedTuple):
    status: int
    headers: "dict[str, str]"
    body: bytes


def block_checksum(data: bytes) -> "tuple[bytes, str]":
    """(raw SHA-256 digest, its base64) of one block."""
    digest = hashlib.sha256(data).digest()
    return digest, base64.b64encode(digest).decode()


def aggregate_checksum(digests: "dict[int, bytes]") -> str:
    """LINEAR aggregation: base64 SHA-256 of the raw digests in ascending block index."""
    return base64.b64encode(
        hashlib.sha256(b"".join(digests[i] for i in sorted(digests))).digest()
    ).decode()


def _error(status: int, headers: "dict[str, str]", body: bytes) -> ApiError:
    code = headers.get("x-amzn-errortype", "").split(":")[0]
    try:
        doc = json.loads(body.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    code = code or str(doc.get("__type") or doc.get("code") or "").split("#")[-1]
    message = str(doc.get("message") or doc.get("Message") or body[:200].decode("latin-1"))
    return ApiError(status, code, message, str(doc.get("Reason") or ""))


class Client:
    """One keep-alive HTTP connection per thread; ``retries`` counts every retried call."""

    def __init__(
        self,
        endpoint: str,
        region: str,
        credentials: CredentialSource,
        policy: Optional[RetryPolicy] = None,
        timeout: float = 60.0,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.region = region
        self.credentials = credentials
        self.policy = policy or RetryPolicy()
        self.timeout = timeout
        self.local = threading.local()
        self.lock = threading.Lock()
        self.retries = 0

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            parts = urlsplit(self.endpoint)
            kind = (
                http.client.HTTPSConnection
                if parts.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = kind(parts.netloc, timeout=self.timeout)
            self.local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
            self.local.conn = None

    def request(
        self,
        method: str,
        path: str,
        query: "Optional[list[tuple[str, str]]]" = None,
        headers: "Optional[dict[str, str]]" = None,
        body: bytes = b"",
        unsigned_body: bool = False,
    ) -> Answer:
        """One signed request, no retry; an error answer or a transport error raises ApiError."""
        query = query or []
        base = dict(headers or {})
        if unsigned_body:
            base["X-Amz-Content-SHA256"] = sigv4.UNSIGNED_PAYLOAD
        payload = sigv4.UNSIGNED_PAYLOAD if unsigned_body else hashlib.sha256(body).hexdigest()
        url = self.endpoint + quote(path, safe="/~")
        signed = sigv4.sign(
            sigv4.Request(method, url, query, base, payload),
            self.credentials.get(),
            self.region,
            SERVICE,
        )
        target = urlsplit(url).path + ("?" + sigv4.query_string(query) if query else "")
        signed["Content-Length"] = str(len(body))
        try:
            conn = self._connection()
            conn.request(method, target, body=body, headers=signed)
            answer = conn.getresponse()
            data = answer.read()
        except (OSError, http.client.HTTPException) as exc:
            self._drop_connection()
            raise ApiError(0, "", f"{type(exc).__name__}: {exc}") from exc
        got = {k.lower(): v for k, v in answer.getheaders()}
        if answer.status >= 300:
            raise _error(answer.status, got, data)
        return Answer(answer.status, got, data)

    def call(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` with retries of retryable errors (and at most a couple of checksum
        mismatches); the last error propagates."""
        mismatches = 0
        for n in range(self.policy.attempts):
            try:
                return attempt()
            except ApiError as exc:
                mismatches += exc.checksum
                again = exc.retryable or (exc.checksum and mismatches <= CHECKSUM_RETRIES)
                if not again or n + 1 >= self.policy.attempts:
                    raise
            with self.lock:
                self.retries += 1
            self.policy.sleep(random.uniform(0, min(self.policy.cap, self.policy.base * 2**n)))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ the operations

    def start_snapshot(self, spec: "dict[str, object]") -> "dict[str, object]":
        """StartSnapshot with the JSON body ``spec`` (VolumeSize, Tags, Description, ClientToken,
        Encrypted, KmsKeyArn, Timeout); retried safely thanks to the ClientToken."""
        body = json.dumps(spec).encode()
        answer = self.call(
            lambda: self.request(
                "POST", "/snapshots", headers={"Content-Type": "application/json"}, body=body
            )
        )
        return dict(json.loads(answer.body.decode()))

    def put_block(self, snapshot_id: str, index: int, read: Callable[[], bytes]) -> bytes:
        """PutSnapshotBlock of the bytes ``read()`` returns (read again on each attempt);
        returns the raw digest that was accepted."""
        digest = [b""]

        def attempt() -> Answer:
            data = read()
            digest[0], checksum = block_checksum(data)
            headers = {
                "x-amz-Data-Length": str(len(data)),
                "x-amz-Checksum": checksum,
                "x-amz-Checksum-Algorithm": "SHA256",
                "Content-Type": "application/octet-stream",
            }
            path = f"/snapshots/{snapshot_id}/blocks/{index}"
            return self.request("PUT", path, headers=headers, body=data, unsigned_body=True)

        self.call(attempt)
        return digest[0]

    def complete_snapshot(self, snapshot_id: str, changed: int, checksum: str) -> str:
        headers = {
            "x-amz-ChangedBlocksCount": str(changed),
            "x-amz-Checksum": checksum,
            "x-amz-Checksum-Algorithm": "SHA256",
            "x-amz-Checksum-Aggregation-Method": "LINEAR",
        }
        path = f"/snapshots/completion/{snapshot_id}"
        answer = self.call(lambda: self.request("POST", path, headers=headers))
        return str(json.loads(answer.body.decode() or "{}").get("Status", ""))

    def list_blocks(self, snapshot_id: str) -> "dict[int, str]":
        """ListSnapshotBlocks, every page: block index -> block token."""
        tokens: dict[int, str] = {}
        page = ""
        path = f"/snapshots/{snapshot_id}/blocks"
        while True:
            query = [("maxResults", "10000")] + ([("pageToken", page)] if page else [])
            answer = self.call(lambda q=query: self.request("GET", path, query=q))  # type: ignore[misc]
            doc = json.loads(answer.body.decode())
            for block in doc.get("Blocks", []):
                tokens[int(block["BlockIndex"])] = str(block["BlockToken"])
            page = str(doc.get("NextToken") or "")
            if not page:
                return tokens

    def get_block(self, snapshot_id: str, index: int, token: str) -> bytes:
        """GetSnapshotBlock, its data checked against the x-amz-Checksum it came with."""

        def attempt() -> bytes:
            path = f"/snapshots/{snapshot_id}/blocks/{index}"
            answer = self.request("GET", path, query=[("blockToken", token)])
            if block_checksum(answer.body)[1] != answer.headers.get("x-amz-checksum"):
                raise ApiError(0, "", f"block {index}: the data does not match its checksum")
            return answer.body

        return self.call(attempt)
