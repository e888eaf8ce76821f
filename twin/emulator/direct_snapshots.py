"""What the emulator remembers about snapshots written with the EBS direct APIs (StartSnapshot /
PutSnapshotBlock / CompleteSnapshot); the HTTP side and the AWS behaviour are ebs_direct_write.py.

The snapshot itself is an ordinary EC2 snapshot record of moto's EC2 backend with its sparse file
in EmulatorState.snapshot_files, like one CreateSnapshot made; this is only the open-snapshot
bookkeeping: per-block checksums for CompleteSnapshot's aggregate, the timeout, ClientTokens.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DirectSnapshot:
    snapshot_id: str
    volume_size_gib: int
    timeout_minutes: int
    # clock() of StartSnapshot or of the last put: the Timeout runs from there
    last_activity: float
    # block index -> raw SHA-256 digest (32 bytes) of the last data put there
    digests: dict[int, bytes] = field(default_factory=dict)
    # CompleteSnapshot accepted: no more puts; the EC2 record moves on to `completed`
    sealed: bool = False
    # the StartSnapshot answer, replayed for a retry with the same ClientToken
    start_answer: dict[str, Any] = field(default_factory=dict)
    # requests answered ResourceNotFoundException since StartSnapshot
    # (Faults.ebs_not_found_requests)
    not_found_answers: int = 0

    def blocks(self) -> int:
        return self.volume_size_gib * 2048  # 512 KiB blocks per GiB

    def linear_checksum(self) -> bytes:
        """LINEAR aggregation: SHA-256 over the blocks' raw digests in ascending block index."""
        digest = hashlib.sha256()
        for index in sorted(self.digests):
            digest.update(self.digests[index])
        return digest.digest()


@dataclass
class DirectWrites:
    snapshots: dict[str, DirectSnapshot] = field(default_factory=dict)
    # ClientToken -> (fingerprint of the request's parameters, snapshot id)
    client_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)
    puts_in_flight: int = 0
    puts_throttled: int = 0
    # what the emulator refused / served, for tests and the demo's summary
    concurrent_limit_served: int = 0
    # DeleteSnapshot of a pending direct snapshot refused (Faults.refuse_pending_direct_delete)
    deletes_refused: int = 0
    # puts whose data the emulator corrupted (Faults.ebs_corrupt_puts)
    puts_corrupted: int = 0
    # every snapshot StartSnapshot made (kept after DeleteSnapshot), and the puts written
    started: list[str] = field(default_factory=list)
    puts_accepted: int = 0
    # AWS's behaviours served (Faults.ebs_*): not found right after StartSnapshot, not found
    # while sealing, transient ValidationExceptions, lost CompleteSnapshot answers, repeated
    # completions refused, puts beyond the per-second quota
    not_found_served: int = 0
    seal_not_found_served: int = 0
    transient_served: int = 0
    completions_lost: int = 0
    completions_refused: int = 0
    puts_over_quota: int = 0
    # when the puts of the last second were admitted: the account's, and each snapshot's
    account_puts: deque[float] = field(default_factory=deque)
    snapshot_puts: dict[str, deque[float]] = field(default_factory=dict)
