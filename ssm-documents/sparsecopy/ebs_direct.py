"""EBS direct APIs client (StartSnapshot, PutSnapshotBlock, CompleteSnapshot, ListSnapshotBlocks,
GetSnapshotBlock) over http.client, signed by sigv4.py: the standard library only.

Wire format from botocore's model (ebs 2019-11-02, rest-json). What EBS does, as AWS's own
uploader (awslabs/coldsnap) learned it, and what this client does about it (Client.call):
- throttling (RequestThrottledException, ThrottlingException, ConcurrentLimitExceededException),
  5xx and connection errors: retried with exponential backoff and full jitter for up to
  RetryPolicy.budget seconds (time, not a count of attempts), and every throttling answer halves
  the requests in flight (Pacer: additive increase, multiplicative decrease);
- ResourceNotFoundException right after StartSnapshot (coldsnap #43 / PR #56: "wait and retry,
  2 minutes"): retried for NOT_FOUND_SECONDS after this run started writing to the snapshot
  (Client.started), even after other requests to it succeeded: EBS's view is eventually
  consistent, and with many puts in flight the order in which its hosts answer says nothing
  about the order in which they were sent; after that window "not found" means gone;
- a put refused with a ValidationException that may be transient (INVALID_PARAMETER_VALUE, "Failed
  to read block data", nanovms/ops #1268, or one without a reason, as a checksum mismatch may be):
  the block is read and hashed again and put again, at most PUT_INVALID_RETRIES times, whatever
  the message says;
- an expired session token (403 ExpiredToken...): the credentials are fetched again and the
  request signed again, once.

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
THROTTLING_CODES = frozenset(
    ("RequestThrottledException", "ThrottlingException", "ConcurrentLimitExceededException")
)
RETRYABLE_CODES = THROTTLING_CODES | {"InternalServerException"}
# A put refused for one of these reasons (or none) may succeed when sent again; every other
# ValidationExceptionReason (INVALID_BLOCK, INVALID_SNAPSHOT_ID, ...) is final.
TRANSIENT_PUT_REASONS = frozenset(("", "INVALID_PARAMETER_VALUE", "WRITE_REQUEST_TIMEOUT"))
PUT_INVALID_RETRIES = 4
NOT_FOUND_SECONDS = 120.0  # coldsnap PR #56: EBS advised retrying "not found" for 2 minutes
EXPIRED_TOKEN_CODES = frozenset(("ExpiredToken", "ExpiredTokenException", "RequestExpired"))
MAX_IN_FLIGHT = 128
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
    def throttling(self) -> bool:
        return self.code in THROTTLING_CODES

    @property
    def ambiguous(self) -> bool:
        """The request may have taken effect although it failed (5xx, or no answer)."""
        return self.status == 0 or self.status >= 500

    @property
    def not_found(self) -> bool:
        return self.code == "ResourceNotFoundException"

    @property
    def expired_token(self) -> bool:
        return self.code in EXPIRED_TOKEN_CODES

    @property
    def transient_put(self) -> bool:
        return self.code == "ValidationException" and self.reason in TRANSIENT_PUT_REASONS


class RetryPolicy(NamedTuple):
    attempts: int = 1_000_000  # a count bound for tests; ``budget`` is the one that counts
    base: float = 0.1  # seconds; attempt n sleeps uniform(0, min(cap, base * 2**n))
    cap: float = 20.0
    sleep: Callable[[float], None] = time.sleep
    budget: float = 300.0  # seconds one call may spend retrying throttling and 5xx
    # put_snapshot.Uploader queues a block whose call failed so again, and gives up only when no
    # put at all has succeeded for this long (throttling at the account's quota)
    stall: float = 900.0
    clock: Callable[[], float] = time.monotonic


class Pacer:
    """How many requests may be in flight (AIMD): a throttling answer halves it, once per round
    (answers to requests sent before the last cut are one signal: a burst is one cut), each
    success adds 1/limit (about one more per round of successes), up to ``ceiling``."""

    def __init__(self, ceiling: int = MAX_IN_FLIGHT) -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.lowest = self.limit
        self.in_flight = 0
        self.cuts = 0  # also the round a request is sent in
        self.changed = threading.Condition()

    def acquire(self) -> int:
        """Wait for a slot; the round the request is sent in (for ``release``)."""
        with self.changed:
            while self.in_flight >= max(1, int(self.limit)):
                self.changed.wait()
            self.in_flight += 1
            return self.cuts

    def release(self, throttled: bool, sent: int) -> None:
        with self.changed:
            self.in_flight -= 1
            if throttled and sent == self.cuts:
                self.limit = max(1.0, min(self.limit, self.in_flight + 1) / 2)
                self.lowest = min(self.lowest, self.limit)
                self.cuts += 1
            elif not throttled:
                self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)
            self.changed.notify_all()


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
        self.pacer = Pacer()
        # snapshot id -> until when "not found" is retried: started by this run
        self.young: dict[str, float] = {}

    def started(self, snapshot_id: str) -> None:
        """``snapshot_id`` was started by this run: EBS may not find it for a while."""
        with self.lock:
            self.young.setdefault(snapshot_id, self.policy.clock() + NOT_FOUND_SECONDS)

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

    def call(self, attempt: Callable[[], T], snapshot_id: str = "", put: bool = False) -> T:
        """``attempt()`` with the retries the module's docstring lists (``snapshot_id``: the
        snapshot the request is about; ``put``: a PutSnapshotBlock that reads its data again);
        the last error propagates."""
        started, n, invalid, refreshed = self.policy.clock(), 0, 0, False
        while True:
            sent = self.pacer.acquire()
            try:
                result = attempt()
            except ApiError as exc:
                self.pacer.release(exc.throttling, sent)
                if exc.expired_token and not refreshed:
                    self.credentials.refresh()
                    refreshed = True
                    continue
                if put and exc.transient_put:
                    invalid += 1
                if not self._again(exc, snapshot_id, started, n, put and invalid):
                    raise
            else:
                self.pacer.release(False, sent)
                return result
            with self.lock:
                self.retries += 1
            backoff = self.policy.base * 2 ** min(n, 30)
            self.policy.sleep(random.uniform(0, min(self.policy.cap, backoff)))
            n += 1

    def _again(self, exc: ApiError, snapshot_id: str, started: float, n: int, invalid: int) -> bool:
        """Whether to send the request again (``started``: when the call started; ``invalid``:
        transient put refusals so far, 0 for any request but a put)."""
        now = self.policy.clock()
        if n + 1 >= self.policy.attempts:
            return False
        if exc.retryable:
            return now - started < self.policy.budget
        if exc.not_found:
            with self.lock:
                return now < self.young.get(snapshot_id, 0.0)
        return 0 < invalid <= PUT_INVALID_RETRIES

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
        started = dict(json.loads(answer.body.decode()))
        self.started(str(started.get("SnapshotId", "")))
        return started

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

        self.call(attempt, snapshot_id, put=True)
        return digest[0]

    def complete_snapshot(self, snapshot_id: str, changed: int, checksum: str) -> str:
        """CompleteSnapshot; its status (``pending``: EBS seals it now). With no block put there
        is nothing to checksum: none is sent. A retry after an answer that was lost (5xx, no
        answer) may find the snapshot completed by the lost one: EBS then refuses it as not
        pending (ValidationException INVALID_SNAPSHOT_ID), which means it was accepted."""
        headers = {"x-amz-ChangedBlocksCount": str(changed)}
        if changed:
            headers.update(
                {
                    "x-amz-Checksum": checksum,
                    "x-amz-Checksum-Algorithm": "SHA256",
                    "x-amz-Checksum-Aggregation-Method": "LINEAR",
                }
            )
        path = f"/snapshots/completion/{snapshot_id}"
        lost = [False]

        def attempt() -> Answer:
            try:
                return self.request("POST", path, headers=headers)
            except ApiError as exc:
                lost[0] = lost[0] or exc.ambiguous
                if lost[0] and (exc.code, exc.reason) == (
                    "ValidationException",
                    "INVALID_SNAPSHOT_ID",
                ):
                    return Answer(202, {}, b'{"Status": "pending"}')
                raise

        answer = self.call(attempt, snapshot_id)
        return str(json.loads(answer.body.decode() or "{}").get("Status", ""))

    def list_blocks(self, snapshot_id: str) -> "dict[int, str]":
        """ListSnapshotBlocks, every page: block index -> block token."""
        tokens: dict[int, str] = {}
        page = ""
        path = f"/snapshots/{snapshot_id}/blocks"
        while True:
            query = [("maxResults", "10000")] + ([("pageToken", page)] if page else [])
            answer = self.call(
                lambda q=query: self.request("GET", path, query=q),  # type: ignore[misc]
                snapshot_id,
            )
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

        return self.call(attempt, snapshot_id)
