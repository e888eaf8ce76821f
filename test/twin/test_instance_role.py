"""The transfer instance's own AWS calls in the twin, and the emulator's faults for the direct
snapshot path; the emulator alone, no loop devices:

- a command's environment carries the instance role's session credentials (the data plane reads
  environment credentials first: no instance metadata in the twin), the region and the EBS
  endpoint; the IAM recorder attributes what is signed with them to the instance role;
- `refuse_pending_direct_delete`: DeleteSnapshot of a pending direct snapshot answers
  IncorrectState, while a completed one, one in `error` after its Timeout and a CreateSnapshot
  snapshot are deleted;
- `ebs_corrupt_puts`: a put's data corrupted in transit is refused (its checksum no longer
  matches) and nothing is written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from devkit.ebs import wire
from devkit.pytest_ci import require_root
from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator
from twin.emulator.ssm_twin import instance_env
from twin.iam import check as iam_check
from twin.iam.recorder import INSTANCE_CALLER

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulator]:
    require_root()
    # the API's shape; AWS's quirks (Faults' defaults) are test_ebs_direct_aws.py's
    with Emulator(tmp_path / "emu", Faults.api_only()) as emulator:
        yield emulator


def _ebs(emu: Emulator, env: dict[str, str] | None = None) -> object:
    env = env or {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    return boto3.client(
        "ebs",
        endpoint_url=emu.endpoint,
        region_name=emu.region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        config=Config(retries={"max_attempts": 0}),
    )


def _block(seed: int) -> bytes:
    return (f"block {seed} ".encode() * (EBS_BLOCK // 8 + 1))[:EBS_BLOCK]


def _put(client: object, sid: str, index: int, data: bytes) -> None:
    client.put_snapshot_block(  # type: ignore[attr-defined]
        SnapshotId=sid, BlockIndex=index, BlockData=data, DataLength=len(data),
        Checksum=base64.b64encode(hashlib.sha256(data).digest()).decode(),
        ChecksumAlgorithm="SHA256",
    )  # fmt: skip


def test_a_commands_environment_is_the_instance_role(emu: Emulator, tmp_path: Path) -> None:
    env = instance_env(emu.state, "i-0123456789abcdef0")
    assert env["AWS_ENDPOINT_URL_EBS"] == emu.endpoint and env["AWS_REGION"] == emu.region
    assert (
        env["AWS_ACCESS_KEY_ID"]
        != instance_env(emu.state, "i-0fedcba9876543210")["AWS_ACCESS_KEY_ID"]
    ), "each instance's role session has its own key"
    # the data plane's own client (sparsecopy put-snapshot), with nothing but that environment
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(GIB)
        f.seek(3 * EBS_BLOCK)
        f.write(_block(3))
    run = subprocess.run(
        [sys.executable, str(REPO / "ssm-documents" / "sparsecopy"), "put-snapshot", str(image),
         "--size-gib", "1", "--jobs", "2", "--verify"],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": os.environ["PATH"], **env},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    sid = json.loads(run.stdout.strip().splitlines()[-1])["snapshotId"]
    # the twin's own requests (set-up, inspection) are not recorded
    emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])
    _ebs(emu).list_snapshot_blocks(SnapshotId=sid)  # type: ignore[attr-defined]
    calls = iam_check.load_calls(emu.calls_path)
    assert {c["caller"] for c in calls} == {INSTANCE_CALLER}
    actions = [c["action"] for c in calls]
    assert {"StartSnapshot", "PutSnapshotBlock", "CompleteSnapshot", "ListSnapshotBlocks",
            "GetSnapshotBlock"} == set(actions), actions  # fmt: skip
    assert "unmodelled" not in str(calls)
    put = next(c for c in calls if c["action"] == "PutSnapshotBlock")
    assert put["contexts"][0]["resource"] == f"arn:aws:ec2:{emu.region}::snapshot/{sid}"
    # as IAM does for instance-profile credentials: the instance's ARN in every request context
    assert {c["contexts"][0]["context"]["ec2:SourceInstanceArn"] for c in calls} == {
        f"arn:aws:ec2:{emu.region}:{emu.account}:instance/i-0123456789abcdef0"
    }


def test_a_pending_direct_snapshot_may_be_refused_deletion(
    emu: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    ec2, client = emu.boto3_client("ec2"), _ebs(emu)
    emu.state.faults.refuse_pending_direct_delete = True
    pending = client.start_snapshot(VolumeSize=1, Timeout=10)["SnapshotId"]  # type: ignore[attr-defined]
    _put(client, pending, 0, _block(0))
    with pytest.raises(ClientError) as excinfo:
        ec2.delete_snapshot(SnapshotId=pending)
    assert excinfo.value.response["Error"]["Code"] == "IncorrectState"
    assert emu.state.direct.deletes_refused == 1
    assert pending in emu.state.snapshot_files  # nothing of it was forgotten
    # a completed one is deleted
    done = client.start_snapshot(VolumeSize=1)["SnapshotId"]  # type: ignore[attr-defined]
    client.complete_snapshot(SnapshotId=done, ChangedBlocksCount=0)  # type: ignore[attr-defined]
    for _ in range(4):
        ec2.describe_snapshots(SnapshotIds=[done])
    ec2.delete_snapshot(SnapshotId=done)
    # a CreateSnapshot snapshot still pending is not a direct one: deleted
    volume = ec2.create_volume(Size=1, AvailabilityZone=f"{emu.region}a")["VolumeId"]
    taken = ec2.create_snapshot(VolumeId=volume)["SnapshotId"]
    ec2.delete_snapshot(SnapshotId=taken)
    ec2.delete_volume(VolumeId=volume)
    # past its Timeout the pending one is `error`, and deleted
    real = wire.clock
    monkeypatch.setattr(wire, "clock", lambda: real() + 11 * 60)
    assert ec2.describe_snapshots(SnapshotIds=[pending])["Snapshots"][0]["State"] == "error"
    ec2.delete_snapshot(SnapshotId=pending)
    assert pending not in emu.state.snapshot_files
    # without the fault a pending one is deleted (the other answer the workflow must handle)
    emu.state.faults.refuse_pending_direct_delete = False
    other = client.start_snapshot(VolumeSize=1)["SnapshotId"]  # type: ignore[attr-defined]
    ec2.delete_snapshot(SnapshotId=other)
    assert emu.state.direct.deletes_refused == 1


def test_a_put_corrupted_in_transit_is_refused(emu: Emulator) -> None:
    client = _ebs(emu)
    emu.state.faults.ebs_corrupt_puts = 1
    sid = client.start_snapshot(VolumeSize=1)["SnapshotId"]  # type: ignore[attr-defined]
    with pytest.raises(ClientError) as excinfo:
        _put(client, sid, 5, _block(5))
    assert excinfo.value.response["Error"]["Code"] == "ValidationException"
    assert written_chunks(emu.snapshot_file(sid)) == set()
    _put(client, sid, 5, _block(5))  # the next one arrives whole
    assert written_chunks(emu.snapshot_file(sid)) == {5}
    assert (emu.state.direct.puts_corrupted, emu.state.direct.puts_accepted) == (1, 1)


def test_role_credentials_near_expiry_are_refreshed_and_an_expired_set_refused(
    tmp_path: Path,
) -> None:
    """Faults.ebs_credentials_seconds (FAULT=credentials-near-expiry): the instance gets its role
    credentials from the twin's instance metadata, each set valid that long, and EBS refuses a
    request signed with a set past its Expiration (403 ExpiredTokenException) before the APIs
    and the IAM recorder see it; the data plane fetches in time and completes."""
    require_root()
    with Emulator(tmp_path / "emu", Faults.api_only(ebs_credentials_seconds=17.0)) as emu:
        env = instance_env(emu.state, "i-0123456789abcdef0")
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_EC2_METADATA_SERVICE_ENDPOINT" in env
        image = tmp_path / "disk.img"
        with open(image, "wb") as f:
            f.truncate(GIB)
            for index in range(0, 160, 2):
                f.seek(index * EBS_BLOCK)
                f.write(_block(index))
        emu.state.faults.ebs_put_latency = 0.1  # a copy longer than a set's usable seconds
        run = subprocess.run(
            [sys.executable, str(REPO / "ssm-documents" / "sparsecopy"), "put-snapshot",
             str(image), "--size-gib", "1", "--jobs", "4", "--verify"],
            capture_output=True, text=True, timeout=300, check=False,
            env={"PATH": os.environ["PATH"], **env},
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout.strip().splitlines()[-1])["verifiedBlocks"] == 80
        assert emu.state.credentials_issued >= 2, "the data plane never fetched a new set"
        calls = iam_check.load_calls(emu.calls_path)
        assert {c["caller"] for c in calls} == {INSTANCE_CALLER}
        assert {c["contexts"][0]["context"]["ec2:SourceInstanceArn"] for c in calls} == {
            f"arn:aws:ec2:{emu.region}:{emu.account}:instance/i-0123456789abcdef0"
        }
        # a request signed with a set past its Expiration
        token = min(emu.state.session_expiry, key=emu.state.session_expiry.__getitem__)
        emu.state.session_expiry[token] = 0.0
        key = next(k for k, i in emu.state.instance_keys.items() if i == "i-0123456789abcdef0")
        expired = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "twin-instance-role-secret",
                   "AWS_SESSION_TOKEN": token}  # fmt: skip
        recorded = len(calls)
        with pytest.raises(ClientError) as refused:
            _ebs(emu, expired).start_snapshot(VolumeSize=1)  # type: ignore[attr-defined]
        assert refused.value.response["Error"]["Code"] == "ExpiredTokenException"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert emu.state.expired_tokens_refused == 1
        assert len(iam_check.load_calls(emu.calls_path)) == recorded
