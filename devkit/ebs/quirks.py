"""What the EBS emulator (devkit/ebs/api.py) does besides the API's shape, and what it remembers.

Quirks: AWS's own behaviours and injected faults, all off by default here. The twin turns AWS's
behaviours on by default (twin/emulator/faults.py, Faults.ebs_*); the data-plane tests and the
bench switch on what each one needs. Each one-shot fault ("the first N puts ...") counts against
what DirectWrites has served, so the same Quirks may be handed in again on every request.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Quirks:
    # every request: at most `max_in_flight` served at once (0: no limit), else
    # ConcurrentLimitExceededException; each takes `latency` seconds while it is in flight
    max_in_flight: int = 0
    latency: float = 0.0
    # the first `not_found_requests` puts/completions of a new snapshot answer
    # ResourceNotFoundException, as AWS does for up to ~2 minutes after StartSnapshot (coldsnap #43)
    not_found_requests: int = 0
    # a completed snapshot is sealed `seal_seconds` later at the earliest; while it seals,
    # ListSnapshotBlocks / GetSnapshotBlock answer ResourceNotFoundException if `seal_not_found`
    # (coldsnap #141), else ValidationException (not completed)
    seal_seconds: float = 0.0
    seal_not_found: bool = False
    # the first `transient_put_failures` puts answer ValidationException INVALID_PARAMETER_VALUE
    # "Failed to read block data" (nanovms/ops #1268) and succeed when sent again
    transient_put_failures: int = 0
    # the first `lost_completions` accepted CompleteSnapshot answers are lost (sealed, answered
    # InternalServerException); `strict_completion`: a repeated CompleteSnapshot is refused
    # (INVALID_SNAPSHOT_ID), as is a Checksum with ChangedBlocksCount 0
    lost_completions: int = 0
    strict_completion: bool = False
    # PutSnapshotBlock's quota (AWS: 1,000 a second per snapshot and per account; 0: none),
    # StartSnapshot's (AWS: 100 snapshots pending in the account; 0: none)
    snapshot_puts_per_second: int = 0
    account_puts_per_second: int = 0
    pending_snapshots: int = 0
    # puts answered RequestThrottledException: the first `throttled_puts`, or all
    throttled_puts: int = 0
    throttle_all: bool = False
    # the first `failed_puts` puts answer InternalServerException (500); the first `dropped_puts`
    # get their connection closed without an answer
    failed_puts: int = 0
    dropped_puts: int = 0
    # put data corrupted in transit (the client's checksum no longer matches): the first
    # `corrupt_puts` puts, and every put to a block index in `corrupt_blocks`
    corrupt_puts: int = 0
    corrupt_blocks: frozenset[int] = frozenset()
    # session tokens answered 403 ExpiredTokenException
    expired_tokens: frozenset[str] = frozenset()


@dataclass
class DirectSnapshot:
    """A snapshot StartSnapshot made: what CompleteSnapshot and the Timeout need."""

    snapshot_id: str
    volume_size_gib: int
    timeout_minutes: int
    # clock() of StartSnapshot, of the last put, or of CompleteSnapshot: timeout and seal run
    # from there
    last_activity: float
    # block index -> raw SHA-256 digest (32 bytes) of the last data put there
    digests: dict[int, bytes] = field(default_factory=dict)
    # CompleteSnapshot accepted: no more puts; the snapshot moves on to `completed`
    sealed: bool = False
    # the StartSnapshot answer, replayed for a retry with the same ClientToken
    start_answer: dict[str, Any] = field(default_factory=dict)
    # requests answered ResourceNotFoundException since StartSnapshot (Quirks.not_found_requests)
    not_found_answers: int = 0

    def blocks(self) -> int:
        return self.volume_size_gib * 2048  # 512 KiB blocks per GiB

    def linear_digest(self) -> bytes:
        digest = hashlib.sha256()
        for index in sorted(self.digests):
            digest.update(self.digests[index])
        return digest.digest()


@dataclass
class DirectWrites:
    """The emulator's memory of direct snapshots, and what it served (for tests and reports)."""

    snapshots: dict[str, DirectSnapshot] = field(default_factory=dict)
    # ClientToken -> (fingerprint of the request's parameters, snapshot id)
    client_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)
    # requests by operation; in flight now and at most
    requests: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    concurrent_limit_served: int = 0
    puts_throttled: int = 0
    puts_failed: int = 0
    puts_dropped: int = 0
    puts_corrupted: int = 0
    # DeleteSnapshot of a pending direct snapshot refused (the twin's refuse_pending_direct_delete)
    deletes_refused: int = 0
    # every snapshot StartSnapshot made (kept after DeleteSnapshot), and the puts written
    started: list[str] = field(default_factory=list)
    puts_accepted: int = 0
    # AWS's behaviours served: not found right after StartSnapshot, not found while sealing,
    # transient ValidationExceptions, lost CompleteSnapshot answers, repeated completions
    # refused, puts beyond the per-second quota
    not_found_served: int = 0
    seal_not_found_served: int = 0
    transient_served: int = 0
    completions_lost: int = 0
    completions_refused: int = 0
    puts_over_quota: int = 0
    # when the puts of the last second were admitted: the account's, and each snapshot's
    account_puts: deque[float] = field(default_factory=deque)
    snapshot_puts: dict[str, deque[float]] = field(default_factory=dict)
