"""list_source_blocks: which 512 KiB blocks each source snapshot holds, for the transfer instance.

EBS's ListSnapshotBlocks names the blocks a snapshot holds (metadata only); every other byte of a
volume restored from it reads as zeros, so sparsecopy reads nothing outside the list
(`--source-blocks`). The Lambda lists, not the instance: the instance would need an `ebs` interface
endpoint (per AZ-hour cost) or an internet route, and an EBS grant on its own role; this way the
task role alone may list, and the instance fetches one presigned GET of one object through the S3
route it already has (docs/source-blocks.md).

Listing is a poll task: each call lists for at most SLICE_SECONDS at most PAGES_PER_SECOND pages
(ListSnapshotBlocks has a per-account request rate that other tools share), writes what it got as
one part object of block ranges, and returns a cursor; the next call resumes with the page token
(valid 60 minutes) or, when AWS refuses it, at the next block index. When every source is listed
the parts are merged into one gzip tar, `volume-<index>.json` per source in ListSnapshotBlocks'
shape with "BlockRanges" ([first, count]) for "Blocks", and the parts are deleted.

A snapshot EBS will not list for us (AccessDenied, e.g. another account's key; ValidationException,
e.g. a public snapshot; ResourceNotFound) is copied without a list: the copy reads more but stays
correct, and the report names why (`blockListError`)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import ClientError

from compactor import aws, contract
from compactor.models import BlockListVolume, Plan, SourceBlocksResult
from compactor.observability import logger

# what ListSnapshotBlocks returns as BlockSize and sparsecopy insists on
BLOCK_SIZE = contract.dataplane_constant("ebsBlockBytes")
PAGE_SIZE = contract.limit("blockListPageSize")  # ListSnapshotBlocks' largest MaxResults
PAGES_PER_SECOND = contract.limit_value("blockListPagesPerSecond")
# listing time per call; the Lambda timeout (contract/tasks.json) leaves room to write the objects
SLICE_SECONDS = contract.limit_value("blockListSliceSeconds")
BUNDLE_NAME = "source-blocks.tar.gz"
# the instance fetches the bundle as the first thing the Command document does
URL_EXPIRES_SECONDS = 3600
# errors that mean "EBS will not list this snapshot for us": copy it without a list
_UNLISTABLE = frozenset(
    {"AccessDeniedException", "ValidationException", "ResourceNotFoundException"}
)

Range = list[int]  # [first block index, count]


def bundle_key(execution_name: str) -> str:
    return f"{execution_name}/{BUNDLE_NAME}"


def member_name(index: int) -> str:
    """The bundle member of the volume at job position `index` (the document's loop index)."""
    return f"volume-{index}.json"


def _part_key(execution_name: str, index: int, part: int) -> str:
    return f"{execution_name}/parts/volume-{index}/{part:06d}.json"


def _fresh(plan: Plan) -> SourceBlocksResult:
    volumes: list[BlockListVolume] = [
        {
            "index": v["index"],
            "snapshotId": v["sourceSnapshotId"],
            "done": False,
            "heldBlocks": 0,
            "volumeSizeGiB": None,
            "nextToken": None,
            "nextBlockIndex": 0,
            "parts": 0,
            "blockListError": None,
        }
        for v in sorted(plan["volumes"], key=lambda v: v["index"])
    ]
    return {"complete": False, "bundleKey": None, "volumes": volumes, "pages": 0}


def add_blocks(ranges: list[Range], indexes: Iterable[int]) -> int:
    """Append ascending block indexes to `ranges`, merging runs; returns how many were added."""
    added = 0
    for index in indexes:
        if ranges and ranges[-1][0] + ranges[-1][1] == index:
            ranges[-1][1] += 1
        else:
            ranges.append([index, 1])
        added += 1
    return added


def merge_ranges(parts: Iterable[list[Range]]) -> list[Range]:
    """The parts of one snapshot in order, joined where a part ends where the next begins."""
    merged: list[Range] = []
    for part in parts:
        for first, count in part:
            if merged and merged[-1][0] + merged[-1][1] == first:
                merged[-1][1] += count
            else:
                merged.append([first, count])
    return merged


class _Pacer:
    """At most PAGES_PER_SECOND calls per second, and none after the slice's deadline."""

    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.clock, self.sleep = clock, sleep
        self.deadline = clock() + SLICE_SECONDS
        self.next_call = clock()

    def may_call(self) -> bool:
        now = self.clock()
        at = max(now, self.next_call)
        if at >= self.deadline:
            return False
        if at > now:
            self.sleep(at - now)
        self.next_call = at + 1.0 / PAGES_PER_SECOND
        return True


def list_blocks(
    plan: Plan,
    previous: SourceBlocksResult | None,
    bucket: str,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SourceBlocksResult:
    state = previous if previous and previous.get("volumes") else _fresh(plan)
    if state["complete"]:
        return state
    execution = plan["executionName"]
    pacer = _Pacer(clock, sleep)
    for volume in state["volumes"]:
        if volume["done"]:
            continue
        ranges: list[Range] = []
        try:
            _list_volume(volume, ranges, pacer, state)
        finally:
            # what this call listed is kept even when a call below failed
            if ranges:
                _put_json(bucket, _part_key(execution, volume["index"], volume["parts"]), ranges)
                volume["parts"] += 1
        if not volume["done"]:
            return state  # the slice is over (or a "later" answer): the loop calls again
    _write_bundle(bucket, execution, state)
    return state


def _list_volume(
    volume: BlockListVolume, ranges: list[Range], pacer: _Pacer, state: SourceBlocksResult
) -> None:
    while pacer.may_call():
        args: dict[str, Any] = {"SnapshotId": volume["snapshotId"], "MaxResults": PAGE_SIZE}
        if volume["nextToken"]:
            args["NextToken"] = volume["nextToken"]
        else:
            args["StartingBlockIndex"] = volume["nextBlockIndex"]
        try:
            page = aws.ebs().list_snapshot_blocks(**args)
        except ClientError as error:
            code = aws.error_code(error)
            if aws.is_transient(error):
                logger.info("ListSnapshotBlocks: later", extra={"error": code})
                return
            if volume["nextToken"] and code == "ValidationException":
                # an expired or refused page token: resume at the next block instead
                volume["nextToken"] = None
                continue
            if code in _UNLISTABLE:
                _give_up(volume, f"{code}: {aws.error_message(error)}")
                return
            raise
        state["pages"] += 1
        if int(page.get("BlockSize", BLOCK_SIZE)) != BLOCK_SIZE:
            _give_up(volume, f"ListSnapshotBlocks answered BlockSize {page.get('BlockSize')}")
            return
        volume["volumeSizeGiB"] = int(page["VolumeSize"])
        indexes = [int(b["BlockIndex"]) for b in page.get("Blocks", [])]
        volume["heldBlocks"] = (volume["heldBlocks"] or 0) + add_blocks(ranges, indexes)
        if indexes:
            volume["nextBlockIndex"] = indexes[-1] + 1
        volume["nextToken"] = page.get("NextToken") or None
        if not volume["nextToken"]:
            volume["done"] = True
            return


def _give_up(volume: BlockListVolume, why: str) -> None:
    logger.warning("source snapshot not listed", extra={"snapshotId": volume["snapshotId"]})
    volume["done"] = True
    volume["heldBlocks"] = None
    volume["nextToken"] = None
    volume["blockListError"] = why


def _write_bundle(bucket: str, execution: str, state: SourceBlocksResult) -> None:
    s3 = aws.s3()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for volume in state["volumes"]:
            if volume["blockListError"] is not None:
                continue
            parts = [
                _get_json(bucket, _part_key(execution, volume["index"], n))
                for n in range(volume["parts"])
            ]
            body = json.dumps(
                {
                    "BlockSize": BLOCK_SIZE,
                    "VolumeSize": volume["volumeSizeGiB"],
                    "SnapshotId": volume["snapshotId"],
                    "BlockRanges": merge_ranges(parts),
                },
                separators=(",", ":"),
            ).encode()
            info = tarfile.TarInfo(member_name(volume["index"]))
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    s3.put_object(Bucket=bucket, Key=bundle_key(execution), Body=buffer.getvalue())
    for volume in state["volumes"]:
        for n in range(volume["parts"]):
            s3.delete_object(Bucket=bucket, Key=_part_key(execution, volume["index"], n))
    state["complete"] = True
    state["bundleKey"] = bundle_key(execution)


def _put_json(bucket: str, key: str, value: object) -> None:
    body = gzip.compress(json.dumps(value, separators=(",", ":")).encode())
    aws.s3().put_object(Bucket=bucket, Key=key, Body=body)


def _get_json(bucket: str, key: str) -> Any:
    return json.loads(gzip.decompress(aws.s3().get_object(Bucket=bucket, Key=key)["Body"].read()))


def presigned_url(bucket: str, key: str) -> str:
    """A GET of the bundle that only its holder can make, for an hour: the instance role needs no
    S3 grant. Signed by this function's role, which must be allowed s3:GetObject on the key."""
    return str(
        aws.s3().generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=URL_EXPIRES_SECONDS
        )
    )


def delete_execution_objects(bucket: str, execution_name: str) -> tuple[list[str], list[str]]:
    """Delete every object under the execution's prefix. Returns the deleted keys and what answered
    "later" (throttling, 5xx, a key DeleteObjects did not delete): teardown counts those as
    remaining and calls again."""
    s3 = aws.s3()
    deleted: list[str] = []
    later: list[str] = []
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{execution_name}/"
        )
        for page in pages:
            keys = [o["Key"] for o in page.get("Contents", [])]
            if not keys:
                continue
            answer = s3.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            failed = {e["Key"]: e.get("Code", "error") for e in answer.get("Errors", [])}
            later.extend(f"DeleteObjects {key}: {code}" for key, code in failed.items())
            deleted.extend(k for k in keys if k not in failed)
    except ClientError as error:
        if not aws.is_transient(error):
            raise
        later.append(f"S3: {aws.error_code(error)}")
    return deleted, later
