from __future__ import annotations

import gzip
import io
import json
import tarfile
from typing import Any

import pytest
from compactor import aws, source_blocks, teardown
from compactor.handlers import teardown as teardown_handler
from conftest import (
    BUCKET,
    EXECUTION,
    STACK,
    World,
    listed_blocks,
    serve_snapshot_blocks,
)
from support import error_response, plan_of, respond


def plan_for(world: World, count: int = 1) -> dict[str, Any]:
    return plan_of(
        EXECUTION,
        [
            {"index": i, "sourceSnapshotId": world.snapshot(description=f"v{i}")}
            for i in range(count)
        ],
    )


def bundle(key: str = f"{EXECUTION}/source-blocks.tar.gz") -> dict[str, Any]:
    body = aws.s3().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        return {m.name: json.load(tar.extractfile(m)) for m in tar.getmembers()}  # type: ignore[arg-type]


def keys() -> list[str]:
    found = aws.s3().list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return sorted(o["Key"] for o in found)


class FakeTime:
    """A clock that each sleep (and each ListSnapshotBlocks call) moves forward."""

    def __init__(self, per_call: float = 0.0) -> None:
        self.now = 0.0
        self.per_call = per_call
        self.slept = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


def test_pages_become_ranges_in_one_bundle_and_the_parts_are_deleted(world: World) -> None:
    plan = plan_for(world, 2)
    first, second = (v["sourceSnapshotId"] for v in plan["volumes"])
    held = [0, 1, 2, 7, *range(100, 25_100)]  # three pages of 10,000
    calls = serve_snapshot_blocks({first: held, second: []}, volume_gib=16)
    listed = listed_blocks(world, plan)
    assert listed["complete"] and listed["bundleKey"] == f"{EXECUTION}/source-blocks.tar.gz"
    assert [v["heldBlocks"] for v in listed["volumes"]] == [len(held), 0]
    assert all(c["MaxResults"] == 10_000 for c in calls)
    assert len([c for c in calls if c["SnapshotId"] == first]) == 3
    assert bundle() == {
        "volume-0.json": {
            "BlockSize": 524_288,
            "VolumeSize": 16,
            "SnapshotId": first,
            "BlockRanges": [[0, 3], [7, 1], [100, 25_000]],
        },
        "volume-1.json": {
            "BlockSize": 524_288,
            "VolumeSize": 16,
            "SnapshotId": second,
            "BlockRanges": [],
        },
    }
    assert keys() == [f"{EXECUTION}/source-blocks.tar.gz"]


def test_a_slice_stops_listing_and_the_next_call_resumes_with_the_token(world: World) -> None:
    plan = plan_for(world)
    snapshot = plan["volumes"][0]["sourceSnapshotId"]
    held = list(range(0, 120_000, 3))  # 40,000 blocks in pages of 100 (EBS may return fewer)
    serve_snapshot_blocks({snapshot: held}, page=100)
    fake = FakeTime()
    state = source_blocks.list_blocks(plan, None, BUCKET, fake.clock, fake.sleep)  # type: ignore[arg-type]
    # 5 pages a second for a 60 s slice, not more
    assert not state["complete"]
    assert state["pages"] == source_blocks.PAGES_PER_SECOND * source_blocks.SLICE_SECONDS
    assert state["volumes"][0]["nextToken"] and state["volumes"][0]["parts"] == 1
    calls = 0
    while not state["complete"]:
        state = source_blocks.list_blocks(plan, state, BUCKET, fake.clock, fake.sleep)  # type: ignore[arg-type]
        calls += 1
    assert calls == 1 and state["pages"] == 400
    ranges = bundle()["volume-0.json"]["BlockRanges"]
    assert sum(count for _, count in ranges) == len(held) == state["volumes"][0]["heldBlocks"]
    assert ranges[:2] == [[0, 1], [3, 1]] and ranges[-1] == [held[-1], 1]


def test_a_refused_page_token_resumes_at_the_next_block(world: World) -> None:
    plan = plan_for(world)
    pages = {"n": 0}

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        pages["n"] += 1
        if params.get("NextToken"):
            return error_response("ValidationException", "The pagination token has expired.")
        start = params["StartingBlockIndex"]
        return {
            "Blocks": [{"BlockIndex": i} for i in range(start, start + 2)],
            "BlockSize": 524_288,
            "VolumeSize": 8,
            **({"NextToken": "stale"} if start == 0 else {}),
        }

    respond(aws.ebs(), "ListSnapshotBlocks", answer)
    state = listed_blocks(world, plan)
    assert state["volumes"][0]["heldBlocks"] == 4 and pages["n"] == 3
    assert bundle()["volume-0.json"]["BlockRanges"] == [[0, 4]]


@pytest.mark.parametrize(
    "code", ["AccessDeniedException", "ValidationException", "ResourceNotFoundException"]
)
def test_a_snapshot_ebs_will_not_list_is_copied_without_a_list(world: World, code: str) -> None:
    plan = plan_for(world, 2)
    first = plan["volumes"][0]["sourceSnapshotId"]

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        if params["SnapshotId"] == first:
            return error_response(code, "not for you")
        return {"Blocks": [{"BlockIndex": 4}], "BlockSize": 524_288, "VolumeSize": 8}

    respond(aws.ebs(), "ListSnapshotBlocks", answer)
    listed = listed_blocks(world, plan)
    assert listed["volumes"][0]["heldBlocks"] is None
    assert listed["volumes"][0]["blockListError"] == f"{code}: not for you"
    assert listed["volumes"][1]["heldBlocks"] == 1
    assert sorted(bundle()) == ["volume-1.json"]


def test_an_unexpected_error_fails_the_task(world: World) -> None:
    plan = plan_for(world)
    respond(aws.ebs(), "ListSnapshotBlocks", lambda _: error_response("KMSInvalidStateException"))
    with pytest.raises(Exception, match="KMSInvalidStateException"):
        listed_blocks(world, plan)


def test_throttling_keeps_what_was_listed_and_the_loop_asks_again(world: World) -> None:
    plan = plan_for(world)
    answers = iter(
        [
            {
                "Blocks": [{"BlockIndex": 0}],
                "BlockSize": 524_288,
                "VolumeSize": 8,
                "NextToken": "a",
            },
            error_response("RequestThrottledException", "slow down"),
            {"Blocks": [{"BlockIndex": 1}], "BlockSize": 524_288, "VolumeSize": 8},
        ]
    )
    respond(aws.ebs(), "ListSnapshotBlocks", lambda _: next(answers))
    first = source_blocks.list_blocks(plan, None, BUCKET, FakeTime().clock, lambda _: None)  # type: ignore[arg-type]
    assert not first["complete"] and first["volumes"][0]["parts"] == 1
    done = source_blocks.list_blocks(plan, first, BUCKET, FakeTime().clock, lambda _: None)  # type: ignore[arg-type]
    assert done["complete"] and bundle()["volume-0.json"]["BlockRanges"] == [[0, 2]]


def test_another_block_size_is_not_trusted(world: World) -> None:
    plan = plan_for(world)
    respond(
        aws.ebs(),
        "ListSnapshotBlocks",
        lambda _: {"Blocks": [{"BlockIndex": 0}], "BlockSize": 4096, "VolumeSize": 8},
    )
    listed = listed_blocks(world, plan)
    assert "BlockSize 4096" in listed["volumes"][0]["blockListError"]


def test_teardown_deletes_the_executions_objects_except_before_a_relaunch(world: World) -> None:
    s3 = aws.s3()
    for key in (f"{EXECUTION}/source-blocks.tar.gz", f"{EXECUTION}/parts/volume-0/000000.json"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=gzip.compress(b"[]"))
    s3.put_object(Bucket=BUCKET, Key="another-execution/source-blocks.tar.gz", Body=b"x")
    kept = teardown.teardown(STACK, EXECUTION, "retry", teardown.Keep(), BUCKET)
    assert kept["deletedObjects"] == [] and len(keys()) == 3
    result = teardown_handler.handler(
        {"executionName": EXECUTION, "outcome": "success", "keep": None}, world.context
    )
    assert sorted(result["deletedObjects"]) == [
        f"{EXECUTION}/parts/volume-0/000000.json",
        f"{EXECUTION}/source-blocks.tar.gz",
    ]
    assert result["remaining"] == 0
    assert keys() == ["another-execution/source-blocks.tar.gz"]


def test_teardown_counts_objects_s3_did_not_delete_as_remaining(world: World) -> None:
    aws.s3().put_object(Bucket=BUCKET, Key=f"{EXECUTION}/source-blocks.tar.gz", Body=b"x")
    respond(aws.s3(), "ListObjectsV2", lambda _: error_response("SlowDown", "reduce rate"))
    result = teardown.teardown(STACK, EXECUTION, "failure", teardown.Keep(), BUCKET)
    assert result["remaining"] == 1 and result["transientErrors"] == ["S3: SlowDown"]
