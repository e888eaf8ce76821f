"""EBS direct writes in the emulator (twin/emulator/ebs_direct.py, devkit/ebs) through boto3's `ebs`
client: StartSnapshot -> PutSnapshotBlock -> CompleteSnapshot into the twin's EC2 snapshot records
and sparse files, the refusals AWS answers, ClientToken idempotency, throttling, the concurrency
limit, the Timeout, GetSnapshotBlock, and a volume created from a direct snapshot. No loop
devices: the emulator alone."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devkit.ebs import wire
from devkit.pytest_ci import require_root
from twin.emulator import ebs_direct
from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator

GIB = 1024**3


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulator]:
    require_root()
    # the API's shape; AWS's quirks (Faults' defaults) are test_ebs_direct_aws.py's
    with Emulator(tmp_path / "emu", Faults.api_only()) as emulator:
        yield emulator


def _client(emu: Emulator, **config: Any) -> Any:
    return boto3.client(
        "ebs",
        endpoint_url=emu.endpoint,
        region_name=emu.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config) if config else Config(retries={"max_attempts": 0}),
    )


def _block(seed: int) -> bytes:
    return (f"block {seed} ".encode() * (EBS_BLOCK // 8 + 1))[:EBS_BLOCK]


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _checksum(data: bytes) -> str:
    return _b64(hashlib.sha256(data).digest())


def _linear(blocks: dict[int, bytes]) -> str:
    """base64(SHA-256 of the raw per-block digests in ascending block index)."""
    return _b64(
        hashlib.sha256(
            b"".join(hashlib.sha256(blocks[i]).digest() for i in sorted(blocks))
        ).digest()
    )


def _put(client: Any, sid: str, index: int, data: bytes, **over: Any) -> dict[str, Any]:
    args = dict(
        SnapshotId=sid,
        BlockIndex=index,
        BlockData=data,
        DataLength=len(data),
        Checksum=_checksum(data),
        ChecksumAlgorithm="SHA256",
    )
    args.update(over)
    return client.put_snapshot_block(**args)  # type: ignore[no-any-return]


def _complete(client: Any, sid: str, blocks: dict[int, bytes], **over: Any) -> dict[str, Any]:
    args = dict(
        SnapshotId=sid,
        ChangedBlocksCount=len(blocks),
        Checksum=_linear(blocks),
        ChecksumAlgorithm="SHA256",
        ChecksumAggregationMethod="LINEAR",
    )
    args.update(over)
    return client.complete_snapshot(**args)  # type: ignore[no-any-return]


def _error(excinfo: pytest.ExceptionInfo[ClientError]) -> tuple[str, str | None, int]:
    response = excinfo.value.response
    return (
        response["Error"]["Code"],
        response.get("Reason"),
        response["ResponseMetadata"]["HTTPStatusCode"],
    )


def _state(emu: Emulator, sid: str) -> str:
    ec2 = emu.boto3_client("ec2")
    return str(ec2.describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]["State"])


def _until_completed(emu: Emulator, sid: str) -> list[str]:
    seen = [_state(emu, sid) for _ in range(6)]
    assert seen[-1] == "completed", seen
    return seen


BLOCKS = {0: _block(0), 7: b"\0" * EBS_BLOCK, 1500: _block(1500), 2047: _block(2047)}


def test_round_trip_put_complete_describe_list_get(emu: Emulator) -> None:
    client = _client(emu)
    started = client.start_snapshot(VolumeSize=1, Description="direct", Timeout=30)
    sid = started["SnapshotId"]
    assert started["Status"] == "pending" and started["BlockSize"] == EBS_BLOCK
    assert started["VolumeSize"] == 1 and started["OwnerId"] == emu.account
    assert _state(emu, sid) == "pending"
    for index, data in BLOCKS.items():
        answer = _put(client, sid, index, data, Progress=50)
        assert answer["Checksum"] == _checksum(data) and answer["ChecksumAlgorithm"] == "SHA256"
    # the sparse file holds exactly the put blocks (a put of zeros is written too)
    assert sorted(written_chunks(emu.snapshot_file(sid))) == sorted(BLOCKS)
    assert emu.snapshot_file(sid).stat().st_size == GIB
    assert _state(emu, sid) == "pending"  # open until completed
    assert _complete(client, sid, BLOCKS)["Status"] == "pending"
    seen = _until_completed(emu, sid)
    assert seen[0] == "pending"  # completed some time after CompleteSnapshot
    described = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]
    assert described["Description"] == "direct" and described["VolumeSize"] == 1
    assert described["VolumeId"] == "vol-ffffffff"
    page = client.list_snapshot_blocks(SnapshotId=sid)
    assert [b["BlockIndex"] for b in page["Blocks"]] == sorted(BLOCKS)
    for block in page["Blocks"]:
        got = client.get_snapshot_block(
            SnapshotId=sid, BlockIndex=block["BlockIndex"], BlockToken=block["BlockToken"]
        )
        data = got["BlockData"].read()
        assert data == BLOCKS[block["BlockIndex"]]
        assert got["DataLength"] == EBS_BLOCK and got["Checksum"] == _checksum(data)
        assert got["ChecksumAlgorithm"] == "SHA256"
    with open(emu.snapshot_file(sid), "rb") as f:
        f.seek(1500 * EBS_BLOCK)
        assert f.read(EBS_BLOCK) == BLOCKS[1500]


def test_tags_description_and_encryption_reach_describe_snapshots(emu: Emulator) -> None:
    client = _client(emu)
    key = f"arn:aws:kms:{emu.region}:{emu.account}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    sid = client.start_snapshot(
        VolumeSize=2,
        Description="tagged",
        Encrypted=True,
        KmsKeyArn=key,
        Tags=[
            {"Key": "ebs-snapshot-compactor:execution", "Value": "x1"},
            {"Key": "a", "Value": ""},
        ],
    )["SnapshotId"]
    snap = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]
    assert snap["Encrypted"] is True and snap["KmsKeyId"] == key
    assert snap["VolumeSize"] == 2 and snap["Description"] == "tagged"
    assert {t["Key"]: t["Value"] for t in snap["Tags"]} == {
        "ebs-snapshot-compactor:execution": "x1",
        "a": "",
    }
    plain = client.start_snapshot(VolumeSize=1, Encrypted=True)
    assert plain["KmsKeyArn"] == wire.default_kms_key_arn(emu.account, emu.region)
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=1, KmsKeyArn=key)  # a key without Encrypted
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_PARAMETER_VALUE")


def test_put_refusals(emu: Emulator) -> None:
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    data = _block(1)
    cases = {
        "checksum mismatch": dict(Checksum=_checksum(_block(2))),
        "not base64": dict(Checksum="!!!"),
        "block past the volume": dict(BlockIndex=2048),
        "short data": dict(BlockData=data[:4096], DataLength=4096, Checksum=_checksum(data[:4096])),
        "length lies": dict(DataLength=EBS_BLOCK - 1),
    }
    expected = {
        "checksum mismatch": "INVALID_PARAMETER_VALUE",
        "not base64": "INVALID_PARAMETER_VALUE",
        "block past the volume": "INVALID_BLOCK",
        "short data": "INVALID_PARAMETER_VALUE",
        "length lies": "INVALID_PARAMETER_VALUE",
    }
    for name, over in cases.items():
        with pytest.raises(ClientError) as excinfo:
            _put(client, sid, over.pop("BlockIndex", 3), data, **over)
        assert _error(excinfo) == ("ValidationException", expected[name], 400), name
    # nothing of the refused puts was written
    assert not written_chunks(emu.snapshot_file(sid))
    with pytest.raises(ClientError) as excinfo:
        _put(client, "snap-0123456789abcdef0", 0, data)
    assert _error(excinfo) == ("ResourceNotFoundException", "SNAPSHOT_NOT_FOUND", 404)


def test_no_puts_after_completion_and_a_bad_completion_completes_nothing(emu: Emulator) -> None:
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    blocks = {3: _block(3), 1: _block(1)}
    for index, data in blocks.items():
        _put(client, sid, index, data)
    for over in (
        dict(ChangedBlocksCount=3),
        dict(Checksum=_linear({3: _block(3), 1: _block(4)})),
        # the base64 strings concatenated instead of the raw digests
        dict(
            Checksum=_b64(
                hashlib.sha256((_checksum(blocks[1]) + _checksum(blocks[3])).encode()).digest()
            )
        ),
        dict(
            ChecksumAggregationMethod="LINEAR",
            ChecksumAlgorithm="SHA256",
            Checksum=_linear({1: blocks[1]}),
        ),
    ):
        with pytest.raises(ClientError) as excinfo:
            _complete(client, sid, blocks, **over)
        assert _error(excinfo) == ("ValidationException", "INVALID_PARAMETER_VALUE", 400)
        assert [_state(emu, sid) for _ in range(4)] == ["pending"] * 4  # never completes
    assert _complete(client, sid, blocks)["Status"] == "pending"
    with pytest.raises(ClientError) as excinfo:
        _put(client, sid, 5, _block(5))
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_SNAPSHOT_ID")
    _until_completed(emu, sid)
    assert _complete(client, sid, blocks)["Status"] == "completed"  # a retry answers the state
    with pytest.raises(ClientError) as excinfo:
        _put(client, sid, 5, _block(5))
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_SNAPSHOT_ID")
    assert sorted(written_chunks(emu.snapshot_file(sid))) == [1, 3]


def test_client_token_idempotency(emu: Emulator) -> None:
    client = _client(emu)
    first = client.start_snapshot(VolumeSize=1, ClientToken="tok-1", Description="d")
    again = client.start_snapshot(VolumeSize=1, ClientToken="tok-1", Description="d")
    assert again["SnapshotId"] == first["SnapshotId"]
    other = client.start_snapshot(VolumeSize=1, ClientToken="tok-2", Description="d")
    assert other["SnapshotId"] != first["SnapshotId"]
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=2, ClientToken="tok-1", Description="d")
    assert _error(excinfo)[::2] == ("ConflictException", 409)
    ec2 = emu.boto3_client("ec2")
    ids = {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
    assert {first["SnapshotId"], other["SnapshotId"]} <= ids
    assert emu.state.snapshots_created.count(first["SnapshotId"]) == 1


def test_start_refusals(emu: Emulator) -> None:
    client = _client(emu)
    for args, reason in (
        (dict(VolumeSize=65537), "INVALID_VOLUME_SIZE"),
        (dict(VolumeSize=1, Timeout=4321), "INVALID_PARAMETER_VALUE"),
        (dict(VolumeSize=1, Tags=[{"Key": "aws:x", "Value": "y"}]), "INVALID_TAG"),
    ):
        with pytest.raises(ClientError) as excinfo:
            client.start_snapshot(**args)
        assert _error(excinfo)[:2] == ("ValidationException", reason), args


def test_throttled_puts_are_refused_then_served(emu: Emulator) -> None:
    emu.state.faults.ebs_throttled_puts = 2
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    for _ in range(2):
        with pytest.raises(ClientError) as excinfo:
            _put(client, sid, 0, _block(0))
        assert _error(excinfo) == ("RequestThrottledException", "RESOURCE_LEVEL_THROTTLE", 400)
    assert not written_chunks(emu.snapshot_file(sid))
    # botocore's standard retries ride over throttling
    retrying = _client(emu, retries={"mode": "standard", "max_attempts": 5})
    emu.state.faults.ebs_throttled_puts = 4
    _put(retrying, sid, 0, _block(0))
    assert written_chunks(emu.snapshot_file(sid)) == {0}


def test_throttle_at_state_reaches_the_direct_apis(tmp_path: Path) -> None:
    require_root()
    with Emulator(tmp_path / "emu", Faults(throttle_states=("Copy",), throttled_requests=1)) as emu:
        client = _client(emu)
        client.meta.events.register(
            "before-sign.ebs.*",
            lambda request, **_: request.headers.add_header("X-Twin-State", "Copy"),
        )
        with pytest.raises(ClientError) as excinfo:
            client.start_snapshot(VolumeSize=1)
        assert _error(excinfo) == ("RequestThrottledException", "ACCOUNT_THROTTLED", 400)
        assert client.start_snapshot(VolumeSize=1)["Status"] == "pending"


def test_more_puts_in_flight_than_the_limit(emu: Emulator) -> None:
    emu.state.faults.ebs_max_puts_in_flight = 2
    emu.state.faults.ebs_put_latency = 0.5
    client = _client(emu, max_pool_connections=8, retries={"max_attempts": 0})
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    outcomes: dict[int, str] = {}

    def put(index: int) -> None:
        try:
            _put(client, sid, index, _block(index))
            outcomes[index] = "ok"
        except ClientError as exc:
            outcomes[index] = exc.response["Error"]["Code"]

    threads = [threading.Thread(target=put, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(outcomes.values())
    assert codes.count("ok") == 2, codes
    assert codes.count("ConcurrentLimitExceededException") == 4, codes
    ok = sorted(i for i, code in outcomes.items() if code == "ok")
    assert sorted(written_chunks(emu.snapshot_file(sid))) == ok
    assert emu.state.direct.in_flight == 0


def test_an_open_snapshot_past_its_timeout_errors(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1, Timeout=10)["SnapshotId"]
    real = wire.clock
    monkeypatch.setattr(wire, "clock", lambda: real() + 9 * 60)
    _put(client, sid, 0, _block(0))  # a put restarts the timeout
    monkeypatch.setattr(wire, "clock", lambda: real() + 18 * 60)
    assert _state(emu, sid) == "pending"
    monkeypatch.setattr(wire, "clock", lambda: real() + 20 * 60)
    snap = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]
    assert snap["State"] == "error" and "timeout" in snap["StateMessage"]
    with pytest.raises(ClientError) as excinfo:
        _complete(client, sid, {0: _block(0)})
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_SNAPSHOT_ID")
    # a completed snapshot never times out
    done = client.start_snapshot(VolumeSize=1, Timeout=10)["SnapshotId"]
    monkeypatch.setattr(wire, "clock", real)
    _complete(client, done, {})
    monkeypatch.setattr(wire, "clock", lambda: real() + 60 * 60)
    _until_completed(emu, done)


def test_get_snapshot_block_needs_the_listed_token(emu: Emulator) -> None:
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    _put(client, sid, 4, _block(4))
    _complete(client, sid, {4: _block(4)})
    _until_completed(emu, sid)
    token = client.list_snapshot_blocks(SnapshotId=sid)["Blocks"][0]["BlockToken"]
    with pytest.raises(ClientError) as excinfo:
        client.get_snapshot_block(SnapshotId=sid, BlockIndex=5, BlockToken=token)
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_BLOCK_TOKEN")
    got = client.get_snapshot_block(SnapshotId=sid, BlockIndex=4, BlockToken=token)
    assert got["BlockData"].read() == _block(4)


def test_a_volume_from_a_direct_snapshot_holds_its_blocks(emu: Emulator) -> None:
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    for index, data in BLOCKS.items():
        _put(client, sid, index, data)
    _complete(client, sid, BLOCKS)
    _until_completed(emu, sid)
    ec2 = emu.boto3_client("ec2")
    volume = ec2.create_volume(SnapshotId=sid, AvailabilityZone=f"{emu.region}a", Size=2)
    path = emu.state.volume_files[volume["VolumeId"]]
    assert path.stat().st_size == 2 * GIB
    assert sorted(written_chunks(path)) == sorted(BLOCKS)
    with open(path, "rb") as f:
        for index, data in BLOCKS.items():
            f.seek(index * EBS_BLOCK)
            assert f.read(EBS_BLOCK) == data
    image = ec2.register_image(
        Name="direct",
        RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": sid}}],
        Architecture="x86_64",
        VirtualizationType="hvm",
    )
    described = ec2.describe_images(ImageIds=[image["ImageId"]])["Images"][0]
    assert described["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"] == sid


# --- IAM: the recorder parses the calls, the resolvers give what iam-data authorizes -----------

_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": "ebs:StartSnapshot",
            "Resource": "arn:aws:ec2:*::snapshot/*",
            "Condition": {
                "StringEquals": {"aws:RequestTag/ebs-snapshot-compactor:execution": "x1"},
                "NumericLessThanEquals": {"ebs:VolumeSize": "8"},
            },
        },
        {
            "Effect": "Allow",
            "Action": ["ebs:PutSnapshotBlock", "ebs:CompleteSnapshot", "ebs:GetSnapshotBlock"],
            "Resource": "arn:aws:ec2:*::snapshot/*",
            "Condition": {
                "StringEquals": {"aws:ResourceTag/ebs-snapshot-compactor:execution": "x1"}
            },
        },
    ],
}


def test_iam_contexts_of_the_direct_calls(emu: Emulator) -> None:
    from twin.iam import check as iam_check

    client = _client(emu)
    client.meta.events.register(
        "before-sign.ebs.*", lambda request, **_: request.headers.add_header("X-Twin-Caller", "fn")
    )
    tags = [{"Key": "ebs-snapshot-compactor:execution", "Value": "x1"}]
    sid = client.start_snapshot(VolumeSize=1, Tags=tags)["SnapshotId"]
    _put(client, sid, 0, _block(0))
    _complete(client, sid, {0: _block(0)})
    _until_completed(emu, sid)
    token = client.list_snapshot_blocks(SnapshotId=sid)["Blocks"][0]["BlockToken"]
    client.get_snapshot_block(SnapshotId=sid, BlockIndex=0, BlockToken=token)
    client.start_snapshot(VolumeSize=16, Tags=tags)  # too big for the policy
    other = client.start_snapshot(VolumeSize=1)["SnapshotId"]  # untagged: the start is denied
    _put(client, other, 0, _block(0))  # and so are its puts
    calls = iam_check.load_calls(emu.calls_path)
    assert [c["action"] for c in calls] == [
        "StartSnapshot", "PutSnapshotBlock", "CompleteSnapshot", "ListSnapshotBlocks",
        "GetSnapshotBlock", "StartSnapshot", "StartSnapshot", "PutSnapshotBlock",
    ]  # fmt: skip
    assert "unmodelled" not in str(calls)
    start = calls[0]["contexts"][0]
    assert start["resource"] == f"arn:aws:ec2:{emu.region}::snapshot/*"
    assert start["context"]["ebs:VolumeSize"] == "1"
    assert calls[1]["contexts"][0]["resource"] == f"arn:aws:ec2:{emu.region}::snapshot/{sid}"
    requests = [
        {"id": i, "caller": "fn", **c}
        for i, c in enumerate(
            call["contexts"][0] for call in calls if call["action"] != "ListSnapshotBlocks"
        )
    ]
    decisions = iam_check._simulate({"fn": [{"name": "p", "policy": _POLICY}]}, requests)
    assert [d["decision"] for d in decisions] == ["Allowed"] * 4 + ["ImplicitlyDenied"] * 3, (
        decisions
    )


# --- the data plane's own client (sparsecopy put-snapshot, D2) against the emulator ------------


def test_sparsecopy_put_snapshot_writes_a_snapshot_the_twin_completes(
    emu: Emulator, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]
    image = tmp_path / "disk.img"
    written = {0: _block(0), 9: _block(9), 10: b"\0" * EBS_BLOCK, 700: b"x" * 100}
    with open(image, "wb") as f:
        f.truncate(GIB)
        for index, data in written.items():
            f.seek(index * EBS_BLOCK)
            f.write(data)
    env = {
        **os.environ,
        **emu.client_env(),
        "AWS_ENDPOINT_URL_EBS": emu.endpoint,
        "SPARSECOPY_PROGRESS_SECONDS": "0",
    }
    run = subprocess.run(
        [sys.executable, str(repo / "ssm-documents" / "sparsecopy"), "put-snapshot", str(image),
         "--size-gib", "1", "--tag", "k=v", "--description", "from sparsecopy", "--jobs", "4"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    sid = summary["snapshotId"]
    # every block the image holds is put, the all-zero block 10 too: unput, it would read as
    # random bytes on an encrypted restore (issue 19)
    expected = {i: d.ljust(EBS_BLOCK, b"\0") for i, d in written.items()}
    assert summary["blocks"] == len(expected) == 4
    assert summary["zero_blocks"] == 1
    assert summary["checksum"] == _linear(expected)  # the twin accepted the same aggregate
    time.sleep(ebs_direct.COMPLETE_SECONDS)
    client = _client(emu)
    page = client.list_snapshot_blocks(SnapshotId=sid)  # completed without DescribeSnapshots
    assert [b["BlockIndex"] for b in page["Blocks"]] == sorted(expected)
    for block in page["Blocks"]:
        got = client.get_snapshot_block(
            SnapshotId=sid, BlockIndex=block["BlockIndex"], BlockToken=block["BlockToken"]
        )
        assert got["BlockData"].read() == expected[block["BlockIndex"]]
    snap = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]
    assert snap["State"] == "completed" and snap["Description"] == "from sparsecopy"
    assert snap["Tags"] == [{"Key": "k", "Value": "v"}]


def test_deleting_an_open_direct_snapshot_removes_it_and_its_file(emu: Emulator) -> None:
    """Teardown of a failed run deletes the unfinished snapshot: gone from EC2, its file gone,
    later puts find no snapshot."""
    client = _client(emu)
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    _put(client, sid, 0, _block(0))
    path = emu.snapshot_file(sid)
    emu.boto3_client("ec2").delete_snapshot(SnapshotId=sid)
    assert not path.exists() and sid not in emu.state.snapshot_files
    with pytest.raises(ClientError) as excinfo:
        _put(client, sid, 1, _block(1))
    assert _error(excinfo) == ("ResourceNotFoundException", "SNAPSHOT_NOT_FOUND", 404)
    with pytest.raises(ClientError) as excinfo:
        _complete(client, sid, {0: _block(0)})
    assert _error(excinfo)[0] == "ResourceNotFoundException"


def test_a_child_of_a_parent_snapshot_starts_with_its_blocks(emu: Emulator) -> None:
    client = _client(emu)
    parent = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    _put(client, parent, 1, _block(1))
    _put(client, parent, 2, _block(2))
    _complete(client, parent, {1: _block(1), 2: _block(2)})
    _until_completed(emu, parent)
    child = client.start_snapshot(VolumeSize=2, ParentSnapshotId=parent)
    assert child["ParentSnapshotId"] == parent and child["VolumeSize"] == 2
    cid = child["SnapshotId"]
    _put(client, cid, 2, _block(20))  # overwrites the parent's block 2 in the child only
    _put(client, cid, 3000, _block(3000))
    # ChangedBlocksCount and the aggregate count the blocks put into this snapshot
    _complete(client, cid, {2: _block(20), 3000: _block(3000)})
    _until_completed(emu, cid)
    page = client.list_snapshot_blocks(SnapshotId=cid)
    assert [b["BlockIndex"] for b in page["Blocks"]] == [1, 2, 3000]
    two = page["Blocks"][1]
    got = client.get_snapshot_block(SnapshotId=cid, BlockIndex=2, BlockToken=two["BlockToken"])
    assert got["BlockData"].read() == _block(20)
    assert sorted(written_chunks(emu.snapshot_file(parent))) == [1, 2]
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=1, ParentSnapshotId=parent, Encrypted=True)
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_PARAMETER_VALUE")
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=1, ParentSnapshotId="snap-0123456789abcdef0")
    assert _error(excinfo)[0] == "ResourceNotFoundException"
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=1, ParentSnapshotId=cid)  # the child is 2 GiB
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_VOLUME_SIZE")
    pending = client.start_snapshot(VolumeSize=1)["SnapshotId"]
    with pytest.raises(ClientError) as excinfo:
        client.start_snapshot(VolumeSize=1, ParentSnapshotId=pending)
    assert _error(excinfo)[:2] == ("ValidationException", "INVALID_SNAPSHOT_ID")
