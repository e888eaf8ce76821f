"""Child execution names: deterministic from the batch execution's name, the item's index and its
source id, so that the same batch names the same children (StartExecution with a running
execution's name and input answers with that execution instead of starting a second one).

Step Functions allows 80 characters and, for CloudWatch logging, only A-Z a-z 0-9 - _. A name is
`<head>-<digest>-<index>-<id>`: head = the batch name's first characters with any other
character replaced by `-`, digest = 8 hex digits of SHA-256 of the whole batch name (two batches
whose names share their first characters, or differ only in a replaced character, still name
their children differently). The estimate's (dry run's) name adds `-dry`."""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 80
ESTIMATE_SUFFIX = "-dry"
# the head's length: a 22-character id, a 3-digit index and the digest leave room for `-dry`
HEAD_MAX = 24
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")
VALID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def child_name(batch_name: str, index: int, source_id: str) -> str:
    head = _NOT_ALLOWED.sub("-", batch_name)[:HEAD_MAX].strip("-_") or "batch"
    digest = hashlib.sha256(batch_name.encode("utf-8")).hexdigest()[:8]
    bare_id = _NOT_ALLOWED.sub("-", source_id.rsplit("/", 1)[-1])
    name = f"{head}-{digest}-{index:03d}-{bare_id}"
    # at most 24 + 8 + 3 + 22 (snap- and 17 hex digits) + 3 dashes = 60 characters; the cut
    # only guards against an index over 999
    room = MAX_NAME - len(ESTIMATE_SUFFIX)
    return name if len(name) <= room else name[:room]


def estimate_name(child: str) -> str:
    return child + ESTIMATE_SUFFIX
