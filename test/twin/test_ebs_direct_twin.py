"""EBS direct ListSnapshotBlocks in the emulator (twin/emulator/ebs_direct.py), through boto3's
`ebs` client as the list_source_blocks Lambda uses it: the blocks of the snapshot's sparse file at
512 KiB granularity, paging, StartingBlockIndex, the refusals AWS answers, and throttling."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ParamValidationError
from botocore.retries.standard import ExponentialBackoff
from twin_helpers import BASE_WRITES, holey_image

from devkit.ebs import reading, wire
from devkit.pytest_ci import require_root
from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import THROTTLED_REQUESTS, Faults, parse
from twin.emulator.server import Emulator

# Blocks written in the holey image: whole blocks, a block written with zeros, a 10-byte write in
# the middle of a block, and a write across a block boundary (699/700).
HOLEY_BLOCKS = [0, 100, 101, 300, 500, 699, 700]
STATE = "List source blocks"


HOLEY_WRITES = [
    *BASE_WRITES,
    (300 * EBS_BLOCK, b"\0" * EBS_BLOCK),  # written, with zeros: EBS lists it, so does the twin
    (500 * EBS_BLOCK + 4096 * 7, b"x" * 10),
    (700 * EBS_BLOCK - 5, b"y" * 10),
]


def _holey_image(path: Path) -> Path:
    return holey_image(path, HOLEY_WRITES)


def _image_with_blocks(path: Path, blocks: list[int]) -> Path:
    return holey_image(path, [(block * EBS_BLOCK, b"d" * 4096) for block in blocks])


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:

    require_root()
    with Emulator(tmp_path_factory.mktemp("ebs") / "emu", Faults()) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def snapshots(emu: Emulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("images")
    return {
        "holey": emu.register_snapshot(_holey_image(work / "holey.img"), "holes"),
        # 250 blocks: pages of 100, 100 and 50
        "250": emu.register_snapshot(_image_with_blocks(work / "a.img", list(range(0, 500, 2)))),
        # 200 blocks: two full pages, then an empty one
        "200": emu.register_snapshot(_image_with_blocks(work / "b.img", list(range(200)))),
        "pending": emu.register_snapshot(_holey_image(work / "p.img"), "p", state="pending"),
    }


def _client(emu: Emulator, **config: Any) -> Any:
    return boto3.client(
        "ebs",
        endpoint_url=emu.endpoint,
        region_name=emu.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config) if config else None,
    )


def _all_pages(client: Any, snapshot_id: str, **first: Any) -> list[dict[str, Any]]:
    pages = [client.list_snapshot_blocks(SnapshotId=snapshot_id, **first)]
    while pages[-1].get("NextToken"):
        args = {k: v for k, v in first.items() if k != "StartingBlockIndex"}
        pages.append(
            client.list_snapshot_blocks(
                SnapshotId=snapshot_id, NextToken=pages[-1]["NextToken"], **args
            )
        )
        assert len(pages) < 50
    return pages


def _indexes(page: dict[str, Any]) -> list[int]:
    return [b["BlockIndex"] for b in page["Blocks"]]


def _error(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str | None, int]:
    response = excinfo.value.response
    return (
        response["Error"]["Code"],
        response.get("Reason"),
        response["ResponseMetadata"]["HTTPStatusCode"],
    )


def test_lists_exactly_the_written_blocks_of_the_sparse_file(
    emu: Emulator, snapshots: dict[str, str]
) -> None:
    sid = snapshots["holey"]
    assert sorted(written_chunks(emu.snapshot_file(sid))) == HOLEY_BLOCKS  # the file, as built
    page = _client(emu).list_snapshot_blocks(SnapshotId=sid, MaxResults=10000)
    assert _indexes(page) == HOLEY_BLOCKS
    assert page["BlockSize"] == 524288
    assert page["VolumeSize"] == 1
    assert "NextToken" not in page
    assert all(b["BlockToken"] for b in page["Blocks"])
    assert len({b["BlockToken"] for b in page["Blocks"]}) == len(HOLEY_BLOCKS)
    now = datetime.datetime.now(datetime.UTC)
    assert now + datetime.timedelta(days=6) < page["ExpiryTime"] < now + datetime.timedelta(days=8)


def test_pages_of_100_over_250_blocks(emu: Emulator, snapshots: dict[str, str]) -> None:
    pages = _all_pages(_client(emu), snapshots["250"], MaxResults=100)
    assert [len(p["Blocks"]) for p in pages] == [100, 100, 50]
    assert [i for p in pages for i in _indexes(p)] == list(range(0, 500, 2))
    assert all(len(p["NextToken"]) <= 256 for p in pages[:-1])


def test_a_full_last_page_carries_a_token_to_an_empty_page(
    emu: Emulator, snapshots: dict[str, str]
) -> None:
    pages = _all_pages(_client(emu), snapshots["200"], MaxResults=100)
    assert [len(p["Blocks"]) for p in pages] == [100, 100, 0]
    assert "NextToken" not in pages[-1]


def test_starting_block_index(emu: Emulator, snapshots: dict[str, str]) -> None:
    client, sid = _client(emu), snapshots["holey"]
    assert _indexes(client.list_snapshot_blocks(SnapshotId=sid, StartingBlockIndex=101)) == [
        101, 300, 500, 699, 700,
    ]  # fmt: skip
    # between listed blocks: the list starts at the next one
    assert _indexes(client.list_snapshot_blocks(SnapshotId=sid, StartingBlockIndex=102)) == [
        300, 500, 699, 700,
    ]  # fmt: skip
    past = client.list_snapshot_blocks(SnapshotId=sid, StartingBlockIndex=5000)
    assert past["Blocks"] == [] and "NextToken" not in past
    # resuming by index where a token would: the 250-block snapshot from block 200 on
    pages = _all_pages(client, snapshots["250"], MaxResults=100, StartingBlockIndex=200)
    assert [i for p in pages for i in _indexes(p)] == list(range(200, 500, 2))


def test_next_token_wins_over_starting_block_index(
    emu: Emulator, snapshots: dict[str, str]
) -> None:
    client, sid = _client(emu), snapshots["250"]
    first = client.list_snapshot_blocks(SnapshotId=sid, MaxResults=100)
    second = client.list_snapshot_blocks(
        SnapshotId=sid, MaxResults=100, NextToken=first["NextToken"], StartingBlockIndex=0
    )
    assert _indexes(second)[0] == 200


def test_a_pending_snapshot_is_refused(emu: Emulator, snapshots: dict[str, str]) -> None:
    with pytest.raises(ClientError) as excinfo:
        _client(emu).list_snapshot_blocks(SnapshotId=snapshots["pending"])
    assert _error(excinfo) == ("ValidationException", "INVALID_SNAPSHOT_ID", 400)
    assert "completed" in excinfo.value.response["Error"]["Message"]


def test_an_unknown_snapshot_is_not_found(emu: Emulator) -> None:
    with pytest.raises(ClientError) as excinfo:
        _client(emu).list_snapshot_blocks(SnapshotId="snap-0123456789abcdef0")
    assert _error(excinfo) == ("ResourceNotFoundException", "SNAPSHOT_NOT_FOUND", 404)


def test_max_results_above_10000_is_refused(emu: Emulator, snapshots: dict[str, str]) -> None:
    with pytest.raises(ClientError) as excinfo:
        _client(emu).list_snapshot_blocks(SnapshotId=snapshots["250"], MaxResults=10001)
    assert _error(excinfo) == ("ValidationException", "INVALID_PARAMETER_VALUE", 400)


def test_max_results_below_100_returns_at_least_100(
    emu: Emulator, snapshots: dict[str, str]
) -> None:
    """The FAQ: under 100, "the API will return at least 100 results" (boto3 refuses to send it;
    a client without parameter validation gets 100)."""
    with pytest.raises(ParamValidationError):
        _client(emu).list_snapshot_blocks(SnapshotId=snapshots["250"], MaxResults=50)
    page = _client(emu, parameter_validation=False).list_snapshot_blocks(
        SnapshotId=snapshots["250"], MaxResults=50
    )
    assert len(page["Blocks"]) == 100 and page["NextToken"]


def test_without_max_results_a_page_is_100(emu: Emulator, snapshots: dict[str, str]) -> None:
    page = _client(emu).list_snapshot_blocks(SnapshotId=snapshots["250"])
    assert len(page["Blocks"]) == reading.DEFAULT_MAX_RESULTS == 100 and page["NextToken"]


def test_forged_foreign_and_expired_tokens_are_refused(
    emu: Emulator, snapshots: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(emu)
    token = client.list_snapshot_blocks(SnapshotId=snapshots["250"], MaxResults=100)["NextToken"]
    forged = wire.next_token(snapshots["250"], 0, 0).replace("A", "B", 1)
    for sid, bad in (
        (snapshots["250"], forged),
        (snapshots["250"], "bm90IGEgdG9rZW4="),
        (snapshots["200"], token),  # another snapshot's token
    ):
        with pytest.raises(ClientError) as excinfo:
            client.list_snapshot_blocks(SnapshotId=sid, NextToken=bad)
        assert _error(excinfo) == ("ValidationException", "INVALID_PAGE_TOKEN", 400), bad
    # the token lives 60 minutes
    real = wire.clock
    monkeypatch.setattr(wire, "clock", lambda: real() + 59 * 60)
    assert client.list_snapshot_blocks(SnapshotId=snapshots["250"], NextToken=token)["Blocks"]
    monkeypatch.setattr(wire, "clock", lambda: real() + 61 * 60)
    with pytest.raises(ClientError) as excinfo:
        client.list_snapshot_blocks(SnapshotId=snapshots["250"], NextToken=token)
    assert _error(excinfo) == ("ValidationException", "INVALID_PAGE_TOKEN", 400)
    assert "expired" in excinfo.value.response["Error"]["Message"]


def _in_state(client: Any, state: str) -> Any:
    """Mark the client's requests as the Lambda worker marks them in a Task state."""

    def mark(request: Any, **_: Any) -> None:
        request.headers["X-Twin-State"] = quote(state, safe="")

    client.meta.events.register("before-send", mark)
    return client


def test_throttle_fault_answers_request_throttled(
    emu: Emulator, snapshots: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAULT=throttle@List source blocks: the state's EBS requests get RequestThrottledException
    (HTTP 400, as botocore's model declares it), which botocore retries as throttling."""
    fault = parse(f"throttle@{STATE}", [STATE, "Launch transfer instance"])
    monkeypatch.setattr(emu.state, "faults", Faults.of(fault))
    monkeypatch.setattr(emu.state, "throttled_served", {})
    once = _in_state(_client(emu, retries={"mode": "standard", "total_max_attempts": 1}), STATE)
    with pytest.raises(ClientError) as excinfo:
        once.list_snapshot_blocks(SnapshotId=snapshots["holey"])
    assert _error(excinfo) == ("RequestThrottledException", "ACCOUNT_THROTTLED", 400)
    # requests of another state (or none) are not throttled
    assert _client(emu).list_snapshot_blocks(SnapshotId=snapshots["holey"])["Blocks"]
    # botocore's standard retries treat it as throttling (the 1 s backoff base of throttling
    # errors, not the 50 ms of others) and get through once the fault is spent; no real waiting
    scales: list[float] = []

    def no_wait(self: ExponentialBackoff, context: Any) -> float:
        scales.append(self._get_base_scale(context))
        return 0.0

    monkeypatch.setattr(ExponentialBackoff, "delay_amount", no_wait)
    patient = _in_state(_client(emu, retries={"mode": "standard", "total_max_attempts": 10}), STATE)
    page = patient.list_snapshot_blocks(SnapshotId=snapshots["holey"])
    assert _indexes(page) == HOLEY_BLOCKS
    assert emu.state.throttled_served == {STATE: THROTTLED_REQUESTS}
    assert page["ResponseMetadata"]["RetryAttempts"] == THROTTLED_REQUESTS - 1
    assert scales == [1] * (THROTTLED_REQUESTS - 1)
