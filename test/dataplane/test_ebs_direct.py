"""sparsecopy's EBS direct APIs client against the local stand-in (devkit/ebs/standin.py):
plain sparse files, no loop devices, no root."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from conftest import PROGRAM, sparsecopy
from sparsecopy import credentials, ebs_direct, put_snapshot, sigv4
from sparsecopy.errors import Failure

from devkit.ebs.standin import StandIn
from devkit.ebs.wire import Request, linear_checksum
from devkit.needs import python39
from devkit.pytest_ci import needs_python39

BLOCK = 524288
KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
ENV = {
    "AWS_ACCESS_KEY_ID": KEYS[0],
    "AWS_SECRET_ACCESS_KEY": KEYS[1],
    "AWS_SESSION_TOKEN": "session-token/with+chars=",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture
def ebs() -> Iterator[StandIn]:
    with StandIn(credentials=KEYS) as stand_in:
        yield stand_in


def _client(stand_in: StandIn, attempts: int = 10, stall: float = 900.0) -> ebs_direct.Client:
    policy = ebs_direct.RetryPolicy(attempts=attempts, sleep=lambda _: None, stall=stall)
    return ebs_direct.Client(
        stand_in.url, "us-east-1", credentials.CredentialSource(env=ENV), policy=policy
    )


def _image(path: Path, blocks: dict[int, bytes], size: int) -> Path:
    """A sparse file of ``size`` bytes with ``blocks`` (index -> bytes) written."""
    with path.open("wb") as f:
        f.truncate(size)
        for index, data in blocks.items():
            f.seek(index * BLOCK)
            f.write(data)
    return path


def _pattern(index: int, length: int = BLOCK) -> bytes:
    return (hashlib.sha256(str(index).encode()).digest() * (length // 32 + 1))[:length]


def _linear(blocks: dict[int, bytes]) -> str:
    """The LINEAR aggregate of blocks' data."""
    return linear_checksum({i: hashlib.sha256(d).digest() for i, d in blocks.items()})


# ---------------------------------------------------------------- SigV4


@pytest.mark.parametrize(
    ("method", "path", "query", "headers", "body", "token", "unsigned"),
    [
        (
            "GET",
            "/snapshots/snap-0123/blocks",
            [("maxResults", "100"), ("pageToken", "a b/c+=")],
            {},
            b"",
            "tok",
            False,
        ),
        (
            "GET",
            "/snapshots/snap-0123/blocks/7",
            [("blockToken", "AAAB/cd+ef==")],
            {},
            b"",
            None,
            False,
        ),
        (
            "POST",
            "/snapshots",
            [],
            {"Content-Type": "application/json"},
            b'{"VolumeSize": 8}',
            "tok/+=",
            False,
        ),
        (
            "POST",
            "/snapshots/completion/snap-0123",
            [],
            {
                "x-amz-ChangedBlocksCount": "3",
                "x-amz-Checksum": "abc=",
                "x-amz-Checksum-Algorithm": "SHA256",
                "x-amz-Checksum-Aggregation-Method": "LINEAR",
            },
            b"",
            "tok",
            False,
        ),
        (
            "PUT",
            "/snapshots/snap-0123/blocks/42",
            [],
            {
                "x-amz-Data-Length": "524288",
                "x-amz-Checksum": "x+y/z=",
                "x-amz-Checksum-Algorithm": "SHA256",
                "Content-Type": "application/octet-stream",
                "User-Agent": "sparsecopy",
            },
            b"\1" * 1000,
            "tok",
            True,
        ),
    ],
)
@pytest.mark.parametrize(
    "endpoint", ["https://ebs.us-east-1.amazonaws.com", "http://127.0.0.1:8123"]
)
def test_sigv4_equals_botocore(
    method: str,
    path: str,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    body: bytes,
    token: str | None,
    unsigned: bool,
    endpoint: str,
) -> None:
    moment = datetime.datetime(2026, 11, 23, 2, 3, 4)
    base = dict(headers)
    if unsigned:
        base["X-Amz-Content-SHA256"] = sigv4.UNSIGNED_PAYLOAD
    payload = sigv4.UNSIGNED_PAYLOAD if unsigned else hashlib.sha256(body).hexdigest()
    ours = sigv4.sign(
        sigv4.Request(method, endpoint + path, query, base, payload),
        sigv4.Credentials(*KEYS, token),
        "us-east-1",
        "ebs",
        moment.replace(tzinfo=datetime.UTC),
    )
    request = AWSRequest(
        method=method,
        url=endpoint + path,
        headers=dict(headers),
        data=body,
        params=query,  # type: ignore[arg-type]
    )
    if unsigned:
        request.context["payload_signing_enabled"] = False  # botocore's v4-unsigned-body
    with mock.patch("botocore.auth.get_current_datetime", return_value=moment):
        SigV4Auth(BotoCredentials(*KEYS, token), "ebs", "us-east-1").add_auth(request)
    theirs = dict(request.headers.items())
    assert ours["Authorization"] == theirs["Authorization"]
    assert {k: v for k, v in ours.items() if k != "Host"} == theirs
    assert ours["Host"] == endpoint.split("://")[1].replace(":443", "")


# ---------------------------------------------------------------- credentials


class _Imds:
    """A fake IMDSv2: a token for a PUT, role credentials that expire at ``expires``."""

    def __init__(self) -> None:
        self.expires = "2026-11-23T03:00:00Z"
        self.served = 0
        self.region, self.domain = "eu-west-3", "amazonaws.com"
        self.failures: list[int] = []  # statuses the next token requests are answered with
        self.token_requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, text: str) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text.encode())

            def do_PUT(self) -> None:
                owner.token_requests += 1
                if owner.failures:
                    return self._send(owner.failures.pop(0), "")
                ok = (
                    self.path == "/latest/api/token"
                    and self.headers["X-aws-ec2-metadata-token-ttl-seconds"]
                )
                self._send(200 if ok else 400, "TOKEN")

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != "TOKEN":
                    return self._send(401, "")
                if self.path == "/latest/meta-data/placement/region":
                    return self._send(200, owner.region)
                if self.path == "/latest/meta-data/services/domain":
                    return self._send(200, owner.domain)
                if self.path == "/latest/meta-data/iam/security-credentials/":
                    return self._send(200, "transfer-role")
                owner.served += 1
                doc = {
                    "Code": "Success",
                    "AccessKeyId": f"ASIA{owner.served}",
                    "SecretAccessKey": "secret",
                    "Token": "token",
                    "Expiration": owner.expires,
                }
                return self._send(200, json.dumps(doc))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_role_credentials_come_from_imdsv2_and_refresh_before_expiry() -> None:
    imds = _Imds()
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
    expiry = datetime.datetime(2026, 11, 23, 3, 0, tzinfo=datetime.UTC).timestamp()
    now = [expiry - 3600]
    source = credentials.CredentialSource(env=env, clock=lambda: now[0])
    first = source.get()
    assert first == sigv4.Credentials("ASIA1", "secret", "token")
    now[0] = expiry - credentials.REFRESH_SECONDS - 1
    assert source.get() == first and source.fetches == 1  # still valid: cached
    imds.expires = "2026-11-23T04:00:00Z"
    now[0] = expiry - credentials.REFRESH_SECONDS + 1  # inside the refresh margin
    assert source.get().access_key == "ASIA2" and source.fetches == 2
    assert credentials.region(env) == "eu-west-3"
    assert credentials.endpoint("eu-west-3", env) == "https://ebs.eu-west-3.amazonaws.com"
    imds.server.shutdown()


def test_credentials_near_expiry_are_used_and_fetched_at_most_every_interval() -> None:
    """EC2 may hand out credentials with under 5 minutes left (inside the refresh margin): they
    are used while valid, fetched again at most every REFRESH_INTERVAL, and a failed fetch keeps
    them."""
    imds = _Imds()
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
    expiry = datetime.datetime(2026, 11, 23, 3, 0, tzinfo=datetime.UTC).timestamp()
    now = [expiry - 240]
    source = credentials.CredentialSource(env=env, clock=lambda: now[0])
    first = source.get()
    for _ in range(50):
        assert source.get() == first
    assert source.fetches == 1 == imds.served
    now[0] += credentials.REFRESH_INTERVAL
    assert source.get().access_key == "ASIA2" and source.fetches == 2
    now[0] += credentials.REFRESH_INTERVAL
    imds.failures = [500] * 6  # IMDS is down: keep the valid ones
    with mock.patch.object(credentials.time, "sleep"):
        assert source.get().access_key == "ASIA2" and source.fetches == 2
        assert imds.token_requests == 2 * 2 + 6
        now[0] = expiry  # expired, and IMDS still down: a clear failure
        imds.failures = [503] * 6
        with pytest.raises(Failure, match="instance metadata"):
            source.get()
    imds.server.shutdown()


def test_imds_retries_429_and_5xx_but_not_404() -> None:
    imds = _Imds()
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
    imds.failures = [429, 503, 500, 429]
    with mock.patch.object(credentials.time, "sleep") as slept:
        assert credentials.region(env) == "eu-west-3"
    assert imds.token_requests == 5 and slept.call_count == 4
    imds.failures, imds.token_requests = [404], 0
    with mock.patch.object(credentials.time, "sleep"), pytest.raises(Failure, match="404"):
        credentials.region(env)
    assert imds.token_requests == 1
    imds.server.shutdown()


def test_imds_is_never_reached_through_a_proxy() -> None:
    """A fresh program (urllib reads the proxy variables when it builds its opener) with
    http_proxy pointing nowhere still reaches IMDS."""
    imds = _Imds()
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(
        http_proxy="http://127.0.0.1:9",  # nothing listens there
        HTTP_PROXY="http://127.0.0.1:9",
        AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url,
        PYTHONPATH=str(PROGRAM.parent),
    )
    code = (
        "import sys; from sparsecopy import credentials; "
        "sys.stdout.write(credentials.CredentialSource().get().access_key)"
    )
    run = subprocess.run(
        ["python3", "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert (run.returncode, run.stdout) == (0, "ASIA1"), run.stderr[-500:]
    imds.server.shutdown()


class _Rotating(credentials.CredentialSource):
    """Role credentials whose session token EBS finds expired until they are fetched again."""

    def __init__(self) -> None:
        super().__init__(env={})
        self.token, self.refreshed = "old", 0

    def get(self) -> sigv4.Credentials:
        return sigv4.Credentials(KEYS[0], KEYS[1], self.token)

    def refresh(self) -> None:
        self.refreshed += 1
        self.token = "new"


def test_an_expired_token_is_refreshed_and_the_request_sent_again(
    tmp_path: Path, ebs: StandIn
) -> None:
    image = _image(tmp_path / "disk.img", {0: _pattern(0), 5: _pattern(5)}, 8 * BLOCK)
    ebs.quirks.expired_tokens = frozenset({"old"})
    source = _Rotating()
    policy = ebs_direct.RetryPolicy(sleep=lambda _: None)
    client = ebs_direct.Client(ebs.url, "us-east-1", source, policy=policy)
    summary = put_snapshot.put_snapshot(put_snapshot.PutOptions(str(image), 1, jobs=1), client)
    assert summary["blocks"] == 2 and source.refreshed == 1
    ebs.quirks.expired_tokens = frozenset(
        {"new"}
    )  # still expired after a refresh: one retry, then the error
    with pytest.raises(Failure, match="StartSnapshot: ExpiredTokenException"):
        put_snapshot.put_snapshot(put_snapshot.PutOptions(str(image), 1), client)
    assert source.refreshed == 2


def test_the_endpoint_follows_the_partition_and_fips() -> None:
    imds = _Imds()
    imds.region, imds.domain = "cn-northwest-1", "amazonaws.com.cn"
    on_ec2 = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
    region = credentials.region(on_ec2)
    assert credentials.endpoint(region, on_ec2) == "https://ebs.cn-northwest-1.amazonaws.com.cn"
    imds.server.shutdown()
    for name, expected in {
        "cn-north-1": "https://ebs.cn-north-1.amazonaws.com.cn",
        "us-gov-west-1": "https://ebs.us-gov-west-1.amazonaws.com",
        "us-iso-east-1": "https://ebs.us-iso-east-1.c2s.ic.gov",
        "us-isob-east-1": "https://ebs.us-isob-east-1.sc2s.sgov.gov",
        "eu-west-1": "https://ebs.eu-west-1.amazonaws.com",
    }.items():
        assert credentials.endpoint(name, {"AWS_REGION": name}) == expected
    fips = {"AWS_REGION": "us-gov-west-1", "AWS_USE_FIPS_ENDPOINT": "true"}
    assert (
        credentials.endpoint("us-gov-west-1", fips)
        == "https://ebs-fips.us-gov-west-1.amazonaws.com"
    )


def test_environment_credentials_region_and_endpoint_override_imds() -> None:
    env = {
        **ENV,
        "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ENDPOINT_URL_EBS": "http://x:1",
    }
    source = credentials.CredentialSource(env=env)
    assert source.get() == sigv4.Credentials(KEYS[0], KEYS[1], ENV["AWS_SESSION_TOKEN"])
    assert source.fetches == 0
    assert credentials.region(env) == "us-east-1"
    assert credentials.endpoint("us-east-1", env) == "http://x:1"


# ---------------------------------------------------------------- the aggregated checksum


def test_aggregated_checksum_is_sha256_of_the_raw_digests_in_block_order() -> None:
    """LINEAR: the raw 32-byte digests concatenated (awslabs/coldsnap), not their base64."""
    blocks = {9: _pattern(9), 2: _pattern(2), 5: _pattern(5)}
    digests = {i: hashlib.sha256(d).digest() for i, d in blocks.items()}
    expected = base64.b64encode(
        hashlib.sha256(digests[2] + digests[5] + digests[9]).digest()
    ).decode()
    assert ebs_direct.aggregate_checksum(digests) == expected == linear_checksum(digests)
    b64_joined = "".join(base64.b64encode(digests[i]).decode() for i in (2, 5, 9))
    assert expected != base64.b64encode(hashlib.sha256(b64_joined.encode()).digest()).decode()


# ---------------------------------------------------------------- put-snapshot end to end


def test_put_snapshot_round_trip_puts_every_block_holding_data_zeros_included(
    tmp_path: Path, ebs: StandIn
) -> None:
    size = 40 * BLOCK + 4096  # the last block is partial: padded with zeros
    written = {
        0: _pattern(0),
        3: _pattern(3),
        4: bytes(BLOCK),
        17: b"\0" * 5000 + b"x",
        40: _pattern(40, 4096),
    }
    image = _image(tmp_path / "disk.img", written, size)
    env = {**ENV, "AWS_ENDPOINT_URL_EBS": ebs.url, "SPARSECOPY_PROGRESS_SECONDS": "0"}
    args = ["put-snapshot", str(image), "--size-gib", "1", "--tag", "a=b", "--tag", "Name=x=y"]
    run = sparsecopy(*args, "--description", "d", "--jobs", "4", "--verify", env=env)
    assert run.returncode == 0, run.stderr
    summary = run.summary
    sid = summary["snapshotId"]
    snap = ebs.snapshot(sid)
    # block 4 holds written zeros: put (an absent block reads random on an encrypted restore)
    expected = {i: (d + bytes(BLOCK - len(d))) for i, d in written.items()}
    assert snap.status == "completed" and summary["status"] == "completed"
    assert snap.blocks == expected
    assert ebs.writes.requests["PutSnapshotBlock"] == len(expected) == summary["blocks"] == 5
    assert summary["bytes"] == 5 * BLOCK and summary["verifiedBlocks"] == 5
    assert summary["zero_blocks"] == 1
    assert summary["checksum"] == _linear(snap.blocks)
    started = ebs.writes.snapshots[sid].start_answer
    assert started["Tags"] == [{"Key": "a", "Value": "b"}, {"Key": "Name", "Value": "x=y"}]
    assert started["Description"] == "d" and started["VolumeSize"] == 1
    assert "put-snapshot: 100.0% " in run.stderr and ", bytes " in run.stderr


PYTHON_39 = python39()


@needs_python39()
def test_put_snapshot_runs_on_python_39(tmp_path: Path, ebs: StandIn) -> None:
    """AL2023's python3 is 3.9: the whole put-snapshot path (threads, http.client, SigV4) on it."""
    image = _image(tmp_path / "disk.img", {2: _pattern(2), 5: _pattern(5)}, 8 * BLOCK)
    env = {**os.environ, **ENV, "AWS_ENDPOINT_URL_EBS": ebs.url}
    args = [str(PYTHON_39), str(PROGRAM), "put-snapshot", str(image), "--size-gib", "1", "--verify"]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["verifiedBlocks"] == 2
    assert ebs.snapshots[summary["snapshotId"]].blocks == {2: _pattern(2), 5: _pattern(5)}


def test_checksum_mismatch_never_completes_and_names_the_open_snapshot(
    tmp_path: Path, ebs: StandIn
) -> None:
    image = _image(
        tmp_path / "disk.img", {1: _pattern(1), 2: _pattern(2), 6: _pattern(6)}, 8 * BLOCK
    )
    ebs.quirks.corrupt_blocks = frozenset({2})
    env = {**ENV, "AWS_ENDPOINT_URL_EBS": ebs.url}
    run = sparsecopy("put-snapshot", str(image), "--size-gib", "1", "--jobs", "2", env=env)
    assert run.returncode == 1 and run.stdout == ""
    (snap,) = ebs.snapshots.values()
    assert snap.status == "pending" and ebs.is_open(snap.snapshot_id)
    assert "CompleteSnapshot" not in ebs.writes.requests
    assert f"snapshot {snap.snapshot_id} NOT completed" in run.error_line
    assert "block 2" in run.error_line and "checksum" in run.error_line
    assert ebs.writes.requests["PutSnapshotBlock"] == 3 + ebs_direct.PUT_INVALID_RETRIES


def test_throttled_and_failed_puts_are_retried_and_the_snapshot_completes(
    tmp_path: Path, ebs: StandIn
) -> None:
    blocks = {i: _pattern(i) for i in range(0, 24, 3)}
    image = _image(tmp_path / "disk.img", blocks, 24 * BLOCK)
    ebs.quirks.throttled_puts, ebs.quirks.failed_puts, ebs.quirks.dropped_puts = 6, 3, 2
    client = _client(ebs)
    summary = put_snapshot.put_snapshot(put_snapshot.PutOptions(str(image), 1, jobs=3), client)
    assert summary["status"] == "pending"  # CompleteSnapshot accepted: EBS seals it
    snap = ebs.snapshot(str(summary["snapshotId"]))
    assert snap.status == "completed" and snap.blocks == blocks
    assert summary["retries"] == 11 == ebs.writes.puts_throttled + 3 + 2


def test_persistent_throttling_fails_without_completing(tmp_path: Path, ebs: StandIn) -> None:
    image = _image(tmp_path / "disk.img", {0: _pattern(0), 5: _pattern(5)}, 8 * BLOCK)
    ebs.quirks.throttle_all = True
    with pytest.raises(
        Failure, match=r"snapshot snap-\w+ NOT completed.*RequestThrottledException"
    ):
        put_snapshot.put_snapshot(
            put_snapshot.PutOptions(str(image), 1, jobs=2), _client(ebs, attempts=4, stall=0)
        )
    (snap,) = ebs.snapshots.values()
    assert ebs.is_open(snap.snapshot_id) and not snap.blocks
    assert "CompleteSnapshot" not in ebs.writes.requests


def test_a_wrong_aggregated_checksum_is_refused_and_the_snapshot_stays_open(
    tmp_path: Path, ebs: StandIn
) -> None:
    image = _image(tmp_path / "disk.img", {0: _pattern(0), 5: _pattern(5)}, 8 * BLOCK)

    def base64_joined(digests: dict[int, bytes]) -> str:
        joined = "".join(base64.b64encode(digests[i]).decode() for i in sorted(digests))
        return base64.b64encode(hashlib.sha256(joined.encode()).digest()).decode()

    wrong = mock.patch.object(put_snapshot, "aggregate_checksum", base64_joined)
    with wrong, pytest.raises(Failure, match=r"NOT completed.*aggregated checksum"):
        put_snapshot.put_snapshot(put_snapshot.PutOptions(str(image), 1), _client(ebs))
    (snap,) = ebs.snapshots.values()
    assert ebs.is_open(snap.snapshot_id)  # refused: never sealed


def test_the_pacer_halves_on_throttling_and_grows_back_one_per_round() -> None:
    pacer = ebs_direct.Pacer(ceiling=64)
    rounds = [pacer.acquire() for _ in range(40)]
    for sent in rounds[:10]:  # one burst of throttling answers: one cut, from what was in flight
        pacer.release(True, sent)
    assert pacer.limit == 20 and pacer.cuts == 1
    for sent in rounds[10:25]:
        pacer.release(False, sent)
    assert 20.5 < pacer.limit < 21 and pacer.in_flight == 15  # +1/limit per success
    later = pacer.acquire()  # sent after the cut: its throttling is a new signal
    pacer.release(True, later)
    assert pacer.limit == 8 and pacer.cuts == 2 and pacer.lowest == 8
    for sent in rounds[25:]:
        pacer.release(False, sent)
    assert pacer.in_flight == 0
    while pacer.limit < 64:
        pacer.release(False, pacer.acquire())
    assert pacer.limit == 64  # never above the ceiling


def test_concurrency_limits_shrink_the_puts_in_flight(tmp_path: Path) -> None:
    """EBS refuses more than 4 requests at once (ConcurrentLimitExceededException): the client
    backs off to what is served instead of sending 16 at once for the whole run."""
    blocks = {i: _pattern(i) for i in range(96)}
    image = _image(tmp_path / "disk.img", blocks, 96 * BLOCK)
    with StandIn(latency=0.02, max_concurrency=4) as ebs:
        client = _client(ebs)
        summary = put_snapshot.put_snapshot(put_snapshot.PutOptions(str(image), 1, jobs=16), client)
        assert ebs.snapshots[str(summary["snapshotId"])].blocks == blocks
        assert client.pacer.lowest <= 4 and client.pacer.cuts >= 1
        assert ebs.writes.concurrent_limit_served < 96 // 2, ebs.writes.concurrent_limit_served


@pytest.mark.parametrize("jobs", [1, 4])
def test_requests_in_flight_never_exceed_jobs(tmp_path: Path, jobs: int) -> None:
    blocks = {i: _pattern(i) for i in range(32)}
    image = _image(tmp_path / "disk.img", blocks, 32 * BLOCK)
    with StandIn(latency=0.02, max_concurrency=jobs) as ebs:
        summary = put_snapshot.put_snapshot(
            put_snapshot.PutOptions(str(image), 1, jobs=jobs), _client(ebs)
        )
        assert ebs.writes.concurrent_limit_served == 0 and summary["retries"] == 0
        assert ebs.writes.max_in_flight == jobs  # as many as allowed, never more
        assert ebs.snapshots[str(summary["snapshotId"])].blocks == blocks


def test_verify_waits_for_the_seal_then_reads_every_block_back(tmp_path: Path) -> None:
    blocks = {1: _pattern(1), 7: _pattern(7)}
    image = _image(tmp_path / "disk.img", blocks, 8 * BLOCK)
    policy = ebs_direct.RetryPolicy(sleep=time.sleep)
    with StandIn(seal_seconds=0.5, credentials=KEYS) as ebs:
        client = ebs_direct.Client(
            ebs.url, "us-east-1", credentials.CredentialSource(env=ENV), policy
        )
        with mock.patch.object(put_snapshot, "VERIFY_POLL_SECONDS", 0.05):
            opts = put_snapshot.PutOptions(str(image), 1, verify=True)
            summary = put_snapshot.put_snapshot(opts, client)
        assert summary["verifiedBlocks"] == 2 and summary["status"] == "completed"
        assert ebs.writes.requests["ListSnapshotBlocks"] > 1  # refused while sealing
        assert ebs.writes.requests["GetSnapshotBlock"] == 2


def test_verify_catches_a_snapshot_that_reads_back_different_data(
    tmp_path: Path, ebs: StandIn
) -> None:
    image = _image(tmp_path / "disk.img", {1: _pattern(1), 7: _pattern(7)}, 8 * BLOCK)
    real_read = ebs.store.read

    def tampered(snapshot_id: str, index: int) -> bytes:
        # EBS returns other (self-consistent: the emulator checksums what it sends) data
        return _pattern(8) if index == 7 else real_read(snapshot_id, index)

    ebs.store.read = tampered  # type: ignore[method-assign]
    opts = put_snapshot.PutOptions(str(image), 1, verify=True)
    with pytest.raises(Failure, match=r"completed but does not verify: .*block 7 reads back"):
        put_snapshot.put_snapshot(opts, _client(ebs))


def test_start_snapshot_is_idempotent_with_a_client_token(tmp_path: Path, ebs: StandIn) -> None:
    client = _client(ebs)
    spec = put_snapshot.start_spec(
        put_snapshot.PutOptions(
            "x", 2, kms_key_arn="arn:aws:kms:us-east-1:111122223333:key/k", client_token="tok"
        )
    )
    assert spec["Encrypted"] is True and spec["Timeout"] == 60
    assert client.start_snapshot(spec)["SnapshotId"] == client.start_snapshot(spec)["SnapshotId"]
    assert len(ebs.snapshots) == 1


def test_requests_signed_at_different_moments_verify_side_by_side(ebs: StandIn) -> None:
    """The stand-in answers on many threads: each request's signature is checked at its own
    X-Amz-Date while others are checked (a shared signing clock failed a fresh clone's copy)."""
    signed = []
    for second in range(64):
        moment = datetime.datetime(2026, 11, 27, 10, 0, second % 60, tzinfo=datetime.UTC)
        moment += datetime.timedelta(minutes=second // 60)
        path = f"/snapshots/snap-{second}/blocks"
        headers = sigv4.sign(
            sigv4.Request("GET", ebs.url + path, [], {}, hashlib.sha256(b"").hexdigest()),
            sigv4.Credentials(*KEYS, None),
            "us-east-1",
            "ebs",
            moment,
        )
        signed.append((path, headers))
    refused: list[str] = []

    def check(path: str, headers: dict[str, str]) -> None:
        for _ in range(20):
            try:
                lower = {k.lower(): v for k, v in headers.items()}
                ebs.emulator.check_signature(Request("GET", path, "", lower, b""))
            except Exception as error:  # any refusal is the failure this test counts
                refused.append(f"{path}: {error}")

    threads = [threading.Thread(target=check, args=item) for item in signed]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave as they do on a loaded machine
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert refused == []


def test_a_bad_signature_is_refused(ebs: StandIn) -> None:
    bad = credentials.CredentialSource(env={**ENV, "AWS_SECRET_ACCESS_KEY": "wrong"})
    client = ebs_direct.Client(
        ebs.url, "us-east-1", bad, ebs_direct.RetryPolicy(sleep=lambda _: None)
    )
    with pytest.raises(ebs_direct.ApiError, match="InvalidSignatureException"):
        client.start_snapshot({"VolumeSize": 1})


# ------------------------------------------------------- the stand-in speaks AWS's wire format


def test_boto3_ebs_client_round_trip_against_the_stand_in(ebs: StandIn) -> None:
    import boto3

    client = boto3.client(
        "ebs",
        endpoint_url=ebs.url,
        region_name="us-east-1",
        aws_access_key_id=KEYS[0],
        aws_secret_access_key=KEYS[1],
        aws_session_token="t",
    )
    started = client.start_snapshot(VolumeSize=1, Tags=[{"Key": "k", "Value": "v"}], Timeout=30)
    sid = started["SnapshotId"]
    assert started["Status"] == "pending" and started["BlockSize"] == BLOCK
    data = _pattern(7)
    checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()
    client.put_snapshot_block(
        SnapshotId=sid,
        BlockIndex=7,
        BlockData=data,
        DataLength=BLOCK,
        Checksum=checksum,
        ChecksumAlgorithm="SHA256",
    )
    with pytest.raises(client.exceptions.ValidationException):
        client.put_snapshot_block(
            SnapshotId=sid,
            BlockIndex=8,
            BlockData=data,
            DataLength=BLOCK,
            Checksum=checksum[::-1],
            ChecksumAlgorithm="SHA256",
        )
    ebs.quirks.throttle_all = True
    with pytest.raises(client.exceptions.RequestThrottledException):
        client.put_snapshot_block(
            SnapshotId=sid,
            BlockIndex=8,
            BlockData=data,
            DataLength=BLOCK,
            Checksum=checksum,
            ChecksumAlgorithm="SHA256",
        )
    ebs.quirks.throttle_all = False
    aggregate = _linear({7: data})
    done = client.complete_snapshot(
        SnapshotId=sid,
        ChangedBlocksCount=1,
        Checksum=aggregate,
        ChecksumAlgorithm="SHA256",
        ChecksumAggregationMethod="LINEAR",
    )
    assert done["Status"] == "pending"
    (block,) = client.list_snapshot_blocks(SnapshotId=sid)["Blocks"]
    got = client.get_snapshot_block(SnapshotId=sid, BlockIndex=7, BlockToken=block["BlockToken"])
    assert got["BlockData"].read() == data and got["Checksum"] == checksum


@pytest.mark.needs_root  # the twin's emulator runs as root
def test_put_snapshot_against_the_twins_emulator(tmp_path: Path) -> None:
    """Two independent implementations agree: the program's client (wire format, SigV4, LINEAR
    checksum) against the twin's emulator (twin/emulator/ebs_direct.py), no disks."""
    from twin.emulator.blockstore import written_chunks
    from twin.emulator.faults import Faults
    from twin.emulator.server import Emulator

    written = {0: _pattern(0), 2: bytes(BLOCK), 9: _pattern(9), 30: _pattern(30)}
    image = _image(tmp_path / "disk.img", written, 32 * BLOCK)
    with Emulator(tmp_path / "emu", Faults()) as emu:
        env = {**ENV, "AWS_ENDPOINT_URL_EBS": emu.endpoint, "AWS_REGION": emu.region}
        args = ["put-snapshot", str(image), "--size-gib", "1", "--tag", "k=v", "--verify"]
        run = sparsecopy(*args, "--description", "direct", env=env)
        assert run.returncode == 0, run.stderr
        sid = run.summary["snapshotId"]
        # block 2 holds written zeros: put too, so the snapshot holds it
        assert run.summary["blocks"] == 4 and run.summary["verifiedBlocks"] == 4
        assert sorted(written_chunks(emu.snapshot_file(sid))) == [0, 2, 9, 30]
        snap = emu.boto3_client("ec2").describe_snapshots(SnapshotIds=[sid])["Snapshots"][0]
        assert snap["Description"] == "direct" and {"Key": "k", "Value": "v"} in snap["Tags"]


class _Clock:
    """A clock that moves one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _not_found() -> ebs_direct.ApiError:
    return ebs_direct.ApiError(
        404, "ResourceNotFoundException", "does not exist", "SNAPSHOT_NOT_FOUND"
    )


def _young_client() -> ebs_direct.Client:
    policy = ebs_direct.RetryPolicy(sleep=lambda _: None, clock=_Clock())
    client = ebs_direct.Client("http://127.0.0.1:9", "us-east-1", mock.Mock(), policy=policy)
    client.started("snap-young")
    return client


def test_a_not_found_after_a_success_is_retried_while_the_snapshot_is_young() -> None:
    """Many puts are in flight right after StartSnapshot, and EBS's view is eventually
    consistent: a put may be answered "not found" after another put succeeded, whatever order
    they were sent in (the twin's not-found-after-start case failed so in CI, twice, when the
    client judged by the order of sending)."""
    client = _young_client()
    assert client.call(lambda: "other", "snap-young", put=True) == "other"
    answers = iter(["raise", "ok"])

    def put() -> str:
        if next(answers) == "raise":
            raise _not_found()
        return "put"

    assert client.call(put, "snap-young", put=True) == "put"


def test_a_not_found_past_the_young_window_means_gone() -> None:
    client = _young_client()  # its clock moves a second per reading: past 120 s soon
    assert client.call(lambda: "ok", "snap-young", put=True) == "ok"
    calls: list[float] = []

    def gone() -> str:
        calls.append(client.policy.clock())
        raise _not_found()

    with pytest.raises(ebs_direct.ApiError, match="ResourceNotFoundException"):
        client.call(gone, "snap-young", put=True)
    assert len(calls) > 1 and calls[-1] < ebs_direct.NOT_FOUND_SECONDS + 10


def test_a_not_found_of_a_snapshot_this_run_did_not_start_means_gone() -> None:
    client = _young_client()
    calls: list[int] = []

    def gone() -> str:
        calls.append(1)
        raise _not_found()

    with pytest.raises(ebs_direct.ApiError, match="ResourceNotFoundException"):
        client.call(gone, "snap-other", put=True)
    assert len(calls) == 1
