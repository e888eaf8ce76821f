"""EBS direct as AWS behaves (devkit/ebs in the twin, twin/emulator/ebs_direct.py, Faults'
defaults): the snapshot
not found right after StartSnapshot, not found while it seals, a transient "Failed to read block
data", a lost CompleteSnapshot answer and the refused repeat, PutSnapshotBlock's quota per
snapshot and per account. First each behaviour as the emulator answers it (boto3, no retries),
then the data plane's own client (sparsecopy put-snapshot --verify) riding through each one
alone, all of them at once, and two runs at once sharing the account's quota."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devkit.pytest_ci import require_root
from twin.emulator import ebs_direct
from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import NOT_FOUND_REQUESTS, Faults
from twin.emulator.server import Emulator
from twin.limits import limit

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


@pytest.fixture(autouse=True)
def _root() -> None:
    require_root()


def _client(emu: Emulator) -> Any:
    return boto3.client(
        "ebs",
        endpoint_url=emu.endpoint,
        region_name=emu.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 0}),
    )


def _block(seed: int) -> bytes:
    return (f"block {seed} ".encode() * (EBS_BLOCK // 8 + 1))[:EBS_BLOCK]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _put(client: Any, sid: str, index: int, data: bytes) -> None:
    client.put_snapshot_block(
        SnapshotId=sid, BlockIndex=index, BlockData=data, DataLength=len(data),
        Checksum=_b64(hashlib.sha256(data).digest()), ChecksumAlgorithm="SHA256",
    )  # fmt: skip


def _complete(client: Any, sid: str, blocks: dict[int, bytes]) -> Any:
    linear = hashlib.sha256(b"".join(hashlib.sha256(blocks[i]).digest() for i in sorted(blocks)))
    return client.complete_snapshot(
        SnapshotId=sid, ChangedBlocksCount=len(blocks), Checksum=_b64(linear.digest()),
        ChecksumAlgorithm="SHA256", ChecksumAggregationMethod="LINEAR",
    )  # fmt: skip


def _code(call: Any) -> tuple[str, str | None, int]:
    with pytest.raises(ClientError) as excinfo:
        call()
    response = excinfo.value.response
    return (
        response["Error"]["Code"],
        response.get("Reason"),
        response["ResponseMetadata"]["HTTPStatusCode"],
    )


NOT_FOUND = ("ResourceNotFoundException", "SNAPSHOT_NOT_FOUND", 404)


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(tmp_path / "emu", Faults.api_only()) as emulator:
        yield emulator


# --- the emulator's answers ------------------------------------------------------------------


def test_defaults_are_aws_harsh() -> None:
    faults = Faults()
    assert faults.ebs_not_found_requests == NOT_FOUND_REQUESTS > 0
    assert faults.ebs_seal_not_found and faults.ebs_strict_completion
    assert faults.ebs_transient_put_failures > 0 and faults.ebs_lost_completions > 0
    assert faults.ebs_account_puts_per_second == faults.ebs_snapshot_puts_per_second == 1000
    # EBS's quotas as contract/limits.json states them (resolve_batch sizes a batch by them)
    assert faults.ebs_account_puts_per_second == limit("ebsPutsPerSecondPerAccount")
    assert faults.ebs_pending_snapshots == limit("ebsPendingSnapshotsPerAccount") == 100


def test_right_after_start_the_snapshot_is_not_found(emu: Emulator) -> None:
    emu.state.faults.ebs_not_found_requests = 2
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    assert _code(lambda: _put(client, sid, 0, _block(0))) == NOT_FOUND
    assert _code(lambda: _complete(client, sid, {})) == NOT_FOUND
    _put(client, sid, 0, _block(0))
    assert emu.state.direct.not_found_served == 2
    assert written_chunks(emu.snapshot_file(sid)) == {0}


def test_while_sealing_reads_find_no_snapshot(emu: Emulator) -> None:
    emu.state.faults.ebs_seal_not_found = True
    emu.state.faults.ebs_seal_seconds = 3600.0  # a seal that takes long
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    _put(client, sid, 4, _block(4))
    _complete(client, sid, {4: _block(4)})
    for _ in range(6):  # DescribeSnapshots polls do not end a long seal
        ec2_state = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])
        assert ec2_state["Snapshots"][0]["State"] == "pending"
    assert _code(lambda: client.list_snapshot_blocks(SnapshotId=sid)) == NOT_FOUND
    token = "A" * 44
    get = lambda: client.get_snapshot_block(SnapshotId=sid, BlockIndex=4, BlockToken=token)  # noqa: E731
    assert _code(get) == NOT_FOUND
    assert emu.state.direct.seal_not_found_served == 2
    emu.state.faults.ebs_seal_seconds = 0.0
    ebs_direct.settle(emu.state, emu.ec2, now=1e12)
    assert [b["BlockIndex"] for b in client.list_snapshot_blocks(SnapshotId=sid)["Blocks"]] == [4]


def test_a_put_may_fail_to_read_block_data_once(emu: Emulator) -> None:
    emu.state.faults.ebs_transient_put_failures = 1
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    refused = _code(lambda: _put(client, sid, 0, _block(0)))
    assert refused == ("ValidationException", "INVALID_PARAMETER_VALUE", 400)
    assert not written_chunks(emu.snapshot_file(sid))
    _put(client, sid, 0, _block(0))  # the same put, sent again
    assert written_chunks(emu.snapshot_file(sid)) == {0}


def test_a_lost_completion_answer_then_the_repeat_is_refused(emu: Emulator) -> None:
    emu.state.faults.ebs_lost_completions = 1
    emu.state.faults.ebs_strict_completion = True
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    _put(client, sid, 1, _block(1))
    assert _code(lambda: _complete(client, sid, {1: _block(1)}))[0] == "InternalServerException"
    repeat = _code(lambda: _complete(client, sid, {1: _block(1)}))
    assert repeat == ("ValidationException", "INVALID_SNAPSHOT_ID", 400)
    ec2 = emu.boto3_client("ec2")
    states = [ec2.describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]["State"] for _ in range(5)]
    assert states[-1] == "completed", states  # the lost answer's completion went through
    # nothing put: a checksum of no blocks is refused, no checksum is accepted
    empty = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    assert _code(lambda: _complete(client, empty, {}))[:2] == (
        "ValidationException",
        "INVALID_PARAMETER_VALUE",
    )
    assert client.complete_snapshot(SnapshotId=empty, ChangedBlocksCount=0)["Status"] == "pending"


def test_puts_beyond_the_quota_are_throttled_per_snapshot_and_per_account(emu: Emulator) -> None:
    emu.state.faults.ebs_snapshot_puts_per_second = 3
    emu.state.faults.ebs_account_puts_per_second = 5
    client = _client(emu)
    one, two = (client.start_snapshot(VolumeSize=1)["SnapshotId"] for _ in range(2))
    for index in range(3):
        _put(client, one, index, _block(index))
    throttled = _code(lambda: _put(client, one, 3, _block(3)))
    assert throttled == ("RequestThrottledException", "RESOURCE_LEVEL_THROTTLE", 400)
    _put(client, two, 0, _block(0))
    _put(client, two, 1, _block(1))
    throttled = _code(lambda: _put(client, two, 2, _block(2)))  # the account's 5 in a second
    assert throttled == ("RequestThrottledException", "ACCOUNT_THROTTLED", 400)
    assert emu.state.direct.puts_over_quota == 2


def test_start_snapshot_beyond_the_pending_snapshots_quota_is_refused(emu: Emulator) -> None:
    assert Faults().ebs_pending_snapshots == 100
    emu.state.faults.ebs_pending_snapshots = 2
    client = _client(emu)
    first = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    client.start_snapshot(VolumeSize=1)
    refused = _code(lambda: client.start_snapshot(VolumeSize=1))
    assert refused == ("ServiceQuotaExceededException", "DEPENDENCY_SERVICE_QUOTA_EXCEEDED", 402)
    client.complete_snapshot(SnapshotId=first, ChangedBlocksCount=0)
    ebs_direct.settle(emu.state, emu.ec2, now=1e12)  # sealed: no longer pending
    client.start_snapshot(VolumeSize=1)


# --- the data plane's client rides through --------------------------------------------------


def _image(path: Path, blocks: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        f.truncate(GIB)
        for index, data in blocks.items():
            f.seek(index * EBS_BLOCK)
            f.write(data)
    return path


def _put_snapshot(emu: Emulator, image: Path, *more: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **emu.client_env(),
        "AWS_ENDPOINT_URL_EBS": emu.endpoint,
        "SPARSECOPY_PROGRESS_SECONDS": "0",
    }
    return subprocess.run(
        [sys.executable, str(REPO / "ssm-documents" / "sparsecopy"), "put-snapshot", str(image),
         "--size-gib", "1", "--verify", *more],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


# behaviour -> (its switches, the emulator's count of the times it was met)
BEHAVIOURS: dict[str, tuple[dict[str, Any], str]] = {
    "not-found-after-start": (dict(ebs_not_found_requests=NOT_FOUND_REQUESTS), "not_found_served"),
    "not-found-while-sealing": (dict(ebs_seal_not_found=True), "seal_not_found_served"),
    "failed-to-read-block-data": (dict(ebs_transient_put_failures=2), "transient_served"),
    "lost-completion": (
        dict(ebs_lost_completions=1, ebs_strict_completion=True),
        "completions_refused",
    ),
    "all-at-once": ({}, "completions_lost"),  # Faults(): every default
}


@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS))
def test_sparsecopy_rides_through(behaviour: str, tmp_path: Path) -> None:
    switches, met = BEHAVIOURS[behaviour]
    faults = Faults.api_only(**switches) if switches else Faults()
    written = {0: _block(0), 9: _block(9), 700: _block(700)}
    with Emulator(tmp_path / "emu", faults) as emu:
        run = _put_snapshot(emu, _image(tmp_path / "disk.img", written), "--jobs", "4")
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        assert summary["verifiedBlocks"] == 3 and summary["status"] == "completed"
        assert written_chunks(emu.snapshot_file(summary["snapshotId"])) == set(written)
        assert getattr(emu.state.direct, met) > 0, "the behaviour was never met"


def test_sparsecopy_completes_a_snapshot_of_nothing(tmp_path: Path) -> None:
    with Emulator(tmp_path / "emu", Faults.api_only(ebs_strict_completion=True)) as emu:
        run = _put_snapshot(emu, _image(tmp_path / "disk.img", {}))
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout.strip().splitlines()[-1])
        assert summary["blocks"] == summary["verifiedBlocks"] == 0


def test_two_runs_at_once_share_the_account_quota(tmp_path: Path) -> None:
    """Two instances putting at once, the account's quota far below what they ask for: both
    complete (adaptive concurrency, time-based retries, failed blocks queued again)."""
    quota = 5
    faults = Faults.api_only(ebs_account_puts_per_second=quota, ebs_snapshot_puts_per_second=quota)
    blocks = {i: _block(i) for i in range(0, 120, 2)}  # 60 a run: 24 s of quota at least
    with Emulator(tmp_path / "emu", faults) as emu:
        runs: dict[int, subprocess.CompletedProcess[str]] = {}

        def one(n: int) -> None:
            image = _image(tmp_path / f"disk{n}.img", blocks)
            runs[n] = _put_snapshot(emu, image, "--jobs", "32")

        threads = [threading.Thread(target=one, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for run in runs.values():
            assert run.returncode == 0, run.stderr[-2000:]
            assert json.loads(run.stdout.strip().splitlines()[-1])["verifiedBlocks"] == len(blocks)
        assert emu.state.direct.puts_over_quota > 0  # the quota was met
