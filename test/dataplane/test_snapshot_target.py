"""``sparsecopy job --target snapshot``: each volume's copy put straight into its started EBS
snapshot (ssm-documents/sparsecopy/snapshot_copy.py) against the local stand-in of the EBS direct
APIs (devkit/ebs/standin.py).

The real job runs on real filesystems (loop devices, root): the completed snapshot holds exactly
the 512 KiB blocks a volume-mode copy of the same source writes, byte for byte, all-zero ones
included (the one block set of blocks.py, two sinks). Faults (a corrupted put, persistent
throttling, a snapshot that reads back other data) never leave a completed snapshot that was
not verified; throttled puts ride through. The pairing of the job's lists and the summary line
run without root, the copy stood in for."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import PROGRAM, Run, attached, blank_like, sparsecopy, working_copy
from sparsecopy import credentials, ebs_direct, job, snapshot_copy, summary
from sparsecopy.blocks import BlockSet, Source
from sparsecopy.device import BY_ID_PREFIX
from sparsecopy.errors import Failure
from sparsecopy.snapshot_copy import SnapshotOptions

from devkit import disks
from devkit.ebs.standin import StandIn
from devkit.needs import python39
from devkit.pytest_ci import needs_python39

BLOCK = 524288
KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
ENV = {"AWS_ACCESS_KEY_ID": KEYS[0], "AWS_SECRET_ACCESS_KEY": KEYS[1], "AWS_REGION": "us-east-1"}
SOURCES = ["vol-0000000000000000a", "vol-0000000000000000b"]
SNAPSHOTS = ["snap-2222222222222222a", "snap-2222222222222222b"]
NAMES = ["/dev/sdf", "/dev/sdg"]
BUILDERS: dict[str, Callable[[Path], disks.DiskImage]] = {
    "bare-ext4": disks.build_bare_ext4,
    "bare-ext4-crashed": functools.partial(disks.build_bare_ext4, crash=True),
    "gpt-xfs": disks.build_gpt_xfs,
    "mbr-two-ntfs": disks.build_mbr_ntfs,
}


@pytest.fixture
def ebs() -> Iterator[StandIn]:
    with StandIn(credentials=KEYS) as stand_in:
        yield stand_in


def _start(stand_in: StandIn, size: int) -> str:
    """What start_compaction does before SendCommand: StartSnapshot of the volume's size."""
    return str(stand_in.start_snapshot(max(-(-size // (1 << 30)), 1), Timeout=240)["SnapshotId"])


def _client(stand_in: StandIn) -> ebs_direct.Client:
    # no sleeping: retries bounded by a count, and a block whose retries all failed fails the copy
    policy = ebs_direct.RetryPolicy(attempts=10, sleep=lambda _: None, stall=0.0)
    source = credentials.CredentialSource(env=ENV)
    return ebs_direct.Client(stand_in.url, "us-east-1", source, policy=policy)


def _block_list(path: Path, source: Path) -> Path:
    """The list EBS would give of the source's snapshot: the 512 KiB blocks its image holds."""
    doc = disks.source_block_list(disks.data_chunks(source), source.stat().st_size)
    path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def _served_bundle(directory: Path, lists: dict[int, Path]) -> Iterator[str]:
    """The job's --source-blocks-url: a gzip tar of volume-<i>.json served over local HTTP."""
    bundle = directory / "blocks.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for order, path in lists.items():
            tar.add(path, arcname=f"volume-{order}.json")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/blocks.tar.gz"
    finally:
        server.shutdown()
        server.server_close()


def _blocks_of(path: Path) -> dict[int, bytes]:
    """The 512 KiB blocks a file holds (a volume-mode target: the blocks written)."""
    out = {}
    with path.open("rb") as f:
        for index in sorted(disks.data_chunks(path)):
            f.seek(index * BLOCK)
            data = f.read(BLOCK)
            out[index] = data + bytes(BLOCK - len(data))
    return out


@contextlib.contextmanager
def _instance(tmp_path: Path, volumes: dict[str, Path]) -> Iterator[Path]:
    """The source volumes attached as loop devices, linked by serial as udev does on Nitro."""
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    with contextlib.ExitStack() as stack:
        for volume_id, path in volumes.items():
            device = stack.enter_context(attached(path))
            (by_id / (BY_ID_PREFIX + volume_id.replace("-", ""))).symlink_to(device)
        yield by_id


def _job(
    by_id: Path, stand_in: StandIn, snapshots: list[str], *extra: str, python: str = ""
) -> Run:
    count = len(snapshots)
    run = functools.partial(_run_with, python) if python else sparsecopy
    return run(
        "job",
        "--source-volume-ids",
        ",".join(SOURCES[:count]),
        "--source-device-names",
        ",".join(NAMES[:count]),
        "--target-volume-ids",
        "",
        "--target-device-names",
        "",
        "--target",
        "snapshot",
        "--target-snapshot-ids",
        ",".join(snapshots),
        "--jobs",
        "4",
        *extra,
        env={
            **ENV,
            "AWS_ENDPOINT_URL_EBS": stand_in.url,
            "SPARSECOPY_BY_ID_DIR": str(by_id),
            "SPARSECOPY_PROGRESS_SECONDS": "0",
        },
    )


def _run_with(python: str, *args: str, env: dict[str, str]) -> Run:
    proc = subprocess.run(
        [python, str(PROGRAM), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


# the note of a partition whose replay wrote blocks the list does not hold (plan._limit)
REPLAYED = r"the replay wrote (\d+) needed block\(s\) the list does not hold"


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def pristine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> disks.DiskImage:
    return BUILDERS[request.param](tmp_path_factory.mktemp(request.param) / "source.img")


# ---------------------------------------------------------------- real filesystems


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize("with_list", [False, True], ids=["no-list", "block-list"])
def test_the_snapshot_holds_exactly_the_blocks_a_volume_copy_writes(
    pristine: disks.DiskImage, with_list: bool, tmp_path: Path, ebs: StandIn
) -> None:
    source = working_copy(pristine, tmp_path / "source.img")
    listed = _block_list(tmp_path / "list.json", source.path) if with_list else None
    snapshot_id = _start(ebs, source.size)
    ebs.quirks.seal_seconds = 1.0  # CompleteSnapshot answers pending: verify waits for the seal
    with contextlib.ExitStack() as stack:
        by_id = stack.enter_context(_instance(tmp_path, {SOURCES[0]: source.path}))
        url = ""
        if listed:
            served = tmp_path / "served"
            served.mkdir()
            url = stack.enter_context(_served_bundle(served, {0: listed}))
        run = _job(by_id, ebs, [snapshot_id], "--verify", "true", "--source-blocks-url", url)
    assert run.returncode == 0, run.stderr
    # The same source (a replay is not deterministic: timestamps), now replayed by the job,
    # copied onto a volume as usual.
    target = blank_like(source.path, tmp_path / "target.img")
    blocks_flag = ["--source-blocks", str(listed)] if listed else []
    with attached(source.path) as src, attached(target) as dst:
        copied = sparsecopy("copy", src, dst, *blocks_flag)
    assert copied.returncode == 0, copied.stderr
    expected = _blocks_of(target)
    snap = ebs.snapshot(snapshot_id)
    assert snap.status == "completed"
    replayed = re.search(REPLAYED, run.stderr)
    if listed and replayed and int(replayed.group(1)):
        # The job replayed the journal and put the blocks it wrote outside the list too
        # (test_replay_writes.py); the copy after it had nothing to replay: list only.
        assert set(expected) < set(snap.blocks), run.stderr
        assert len(set(snap.blocks) - set(expected)) == int(replayed.group(1)), run.stderr
    else:
        assert sorted(snap.blocks) == sorted(expected), run.stderr
    for index, data in expected.items():
        assert snap.blocks[index] == data, f"block {index} differs from the volume copy"
    # every block of the set put once (no faults: no retries), the all-zero ones counted
    assert ebs.writes.requests["PutSnapshotBlock"] == len(snap.blocks)
    zeros = [i for i, data in snap.blocks.items() if not data.strip(b"\0")]
    (volume,) = run.summary["volumes"]
    assert volume["zero_blocks"] == len(zeros) and volume["blocks_written"] == len(snap.blocks)
    assert volume["targetSnapshotId"] == snapshot_id and volume["targetVolumeId"] is None
    assert volume["blocks_put"] == len(snap.blocks)
    assert volume["target_bytes_written"] == len(snap.blocks) * BLOCK
    assert volume["verified"] is True
    assert volume["partition_count"] >= 1
    assert volume["fsck"] == {"not_checked": volume["partition_count"]}
    held = len(json.loads(listed.read_text())["Blocks"]) if listed else None
    assert volume["held_blocks"] == held
    assert "verify (volume 1/1): 100.0%" in run.stderr
    assert snapshot_copy.FSCK_NOT_RUN in run.stderr


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_two_volumes_go_into_their_own_snapshots_in_job_order(tmp_path: Path, ebs: StandIn) -> None:
    first = disks.build_bare_ext4(tmp_path / "a.img", size=64 * disks.MIB, seed=21)
    second = disks.build_bare_ext4(tmp_path / "b.img", size=64 * disks.MIB, seed=22)
    snapshots = [_start(ebs, first.size), _start(ebs, second.size)]
    with _instance(tmp_path, {SOURCES[0]: first.path, SOURCES[1]: second.path}) as by_id:
        run = _job(by_id, ebs, snapshots, "--verify", "false")
    assert run.returncode == 0, run.stderr
    volumes = run.summary["volumes"]
    assert [(v["sourceVolumeId"], v["targetSnapshotId"]) for v in volumes] == list(
        zip(SOURCES, snapshots, strict=True)
    )
    assert [v["verified"] for v in volumes] == [False, False]
    assert [v["fsck"] for v in volumes] == [{}, {}]
    for snapshot_id, volume in zip(snapshots, volumes, strict=True):
        assert len(ebs.snapshots[snapshot_id].blocks) == volume["blocks_put"] > 0
    assert "copy (volume 2/2): 100.0%" in run.stderr


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_a_corrupted_put_never_completes_and_the_error_line_names_the_snapshot(
    tmp_path: Path, ebs: StandIn
) -> None:
    source = disks.build_bare_ext4(tmp_path / "a.img", size=64 * disks.MIB, seed=23)
    snapshot_id = _start(ebs, source.size)
    ebs.quirks.corrupt_blocks = frozenset({0})  # the superblock's block: always put
    with _instance(tmp_path, {SOURCES[0]: source.path}) as by_id:
        run = _job(by_id, ebs, [snapshot_id])
    assert run.returncode == 1
    line = run.summary
    assert line["sourceVolumeId"] == SOURCES[0]
    assert line["error"].startswith(
        f"sparsecopy: error: snapshot {snapshot_id} NOT completed, left pending until its "
        "timeout: block 0: ValidationException: The checksum of the block data does not match"
    )
    assert "CompleteSnapshot" not in ebs.writes.requests
    assert ebs.snapshot(snapshot_id).status == "pending"


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_btrfs_which_allocated_trims_is_put_raw_every_block(tmp_path: Path, ebs: StandIn) -> None:
    source = disks.build_btrfs(tmp_path / "a.img")
    snapshot_id = _start(ebs, source.size)
    with _instance(tmp_path, {SOURCES[0]: source.path}) as by_id:
        run = _job(by_id, ebs, [snapshot_id], "--verify", "true")
    assert run.returncode == 0, run.stderr
    (volume,) = run.summary["volumes"]
    assert volume["methods"] == {"raw": 1}
    assert volume["notes"] == [f"partition 1 (btrfs, raw): {snapshot_copy.BTRFS_RAW}"]
    # no block list: every block of a raw partition, zeros included
    held = _blocks_of(source.path)
    every = {i: held.get(i, bytes(BLOCK)) for i in range(source.size // BLOCK)}
    assert ebs.snapshots[snapshot_id].blocks == every
    assert volume["zero_blocks"] == sum(1 for d in every.values() if not d.strip(b"\0")) > 0


PYTHON_39 = python39()


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
@needs_python39()
def test_the_snapshot_job_runs_on_python_39(tmp_path: Path, ebs: StandIn) -> None:
    """AL2023's python3 is 3.9: plan, stream, complete, wait for the seal and read back on it."""
    source = disks.build_bare_ext4(tmp_path / "a.img", size=64 * disks.MIB, seed=24)
    snapshot_id = _start(ebs, source.size)
    with _instance(tmp_path, {SOURCES[0]: source.path}) as by_id:
        run = _job(by_id, ebs, [snapshot_id], "--verify", "true", python=str(PYTHON_39))
    assert run.returncode == 0, run.stderr
    (volume,) = run.summary["volumes"]
    assert volume["verified"] is True
    assert volume["blocks_put"] == len(ebs.snapshots[snapshot_id].blocks) > 0


# ---------------------------------------------------------------- faults, in process


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> disks.DiskImage:
    return disks.build_bare_ext4(tmp_path_factory.mktemp("small") / "a.img", size=64 * disks.MIB)


@contextlib.contextmanager
def _source(small: disks.DiskImage, tmp_path: Path) -> Iterator[str]:
    copy = working_copy(small, tmp_path / "source.img")
    with attached(copy.path) as device:
        yield device


def _copy(device: str, stand_in: StandIn, **changes: Any) -> tuple[str, dict[str, object]]:
    snapshot_id = _start(stand_in, 64 << 20)
    options = SnapshotOptions(device, snapshot_id, jobs=4)._replace(**changes)
    return snapshot_id, snapshot_copy.copy_to_snapshot(options, _client(stand_in))


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_persistent_throttling_never_completes(
    small: disks.DiskImage, tmp_path: Path, ebs: StandIn
) -> None:
    ebs.quirks.throttle_all = True
    with _source(small, tmp_path) as device, pytest.raises(Failure) as failed:
        _copy(device, ebs)
    (snapshot_id,) = ebs.snapshots
    assert str(failed.value).startswith(
        f"snapshot {snapshot_id} NOT completed, left pending until its timeout: block "
    )
    assert "RequestThrottledException" in str(failed.value)
    assert "CompleteSnapshot" not in ebs.writes.requests
    assert ebs.snapshots[snapshot_id].blocks == {}


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_throttled_failed_and_dropped_puts_ride_through_and_complete(
    small: disks.DiskImage, tmp_path: Path, ebs: StandIn
) -> None:
    ebs.quirks.throttled_puts, ebs.quirks.failed_puts, ebs.quirks.dropped_puts = 6, 3, 2
    with _source(small, tmp_path) as device:
        snapshot_id, result = _copy(device, ebs, verify=True)
    snap = ebs.snapshot(snapshot_id)
    assert snap.status == "completed" and result["snapshot_status"] == "completed"
    assert result["blocks_put"] == len(snap.blocks) > 0
    # 6 + 3 + 2; on a loaded machine the stand-in (listen backlog 5) may also reset a few of the
    # 64 connections as they open: transport errors, retried as well
    assert cast(int, result["retries"]) >= 11
    assert ebs.writes.puts_throttled == 6


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_at_least_64_puts_are_kept_in_flight_whatever_the_jobs(tmp_path: Path) -> None:
    """Puts are latency-bound: --jobs 16 still keeps up to PUTS_IN_FLIGHT in flight, never more."""
    limit = snapshot_copy.PUTS_IN_FLIGHT
    image = tmp_path / "data.img"  # no table, no filesystem, no list: every block is copied
    disks.create_sparse(image, 96 * disks.MIB)
    with image.open("r+b") as f:
        for index in range(1, 2 * limit + 20):
            f.seek(index * BLOCK)
            f.write(bytes([index % 251 + 1]) * BLOCK)
    with StandIn(latency=1.0, max_concurrency=limit) as slow, attached(image) as device:
        _, result = _copy(device, slow, jobs=16)
    assert result["blocks_put"] == 96 * disks.MIB // BLOCK
    assert result["zero_blocks"] == 96 * disks.MIB // BLOCK - (2 * limit + 19)
    assert result["puts_in_flight"] == limit == 64
    # all 64 workers are busy for a 1 s put (a loaded machine may start the last few late)
    assert (
        limit * 3 // 4 <= slow.writes.max_in_flight <= limit
        and slow.writes.concurrent_limit_served == 0
    )


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_verify_catches_a_snapshot_that_reads_back_other_data(
    small: disks.DiskImage, tmp_path: Path, ebs: StandIn
) -> None:
    real = ebs.store.read

    def other(snapshot_id: str, index: int) -> bytes:
        data = real(snapshot_id, index)
        if index == max(ebs.snapshots[snapshot_id].blocks):
            # the last put block comes back altered (the emulator sends its checksum along)
            data = data[:-1] + bytes([data[-1] ^ 1])
        return data

    ebs.store.read = other  # type: ignore[method-assign]
    with _source(small, tmp_path) as device, pytest.raises(Failure) as failed:
        _copy(device, ebs, verify=True)
    ((snapshot_id, snap),) = ebs.snapshots.items()
    assert str(failed.value) == (
        f"snapshot {snapshot_id} completed but does not verify: snapshot {snapshot_id}: "
        f"block {max(snap.blocks)} reads back different data"
    )


@pytest.mark.needs_root
@pytest.mark.usefixtures("no_leaks")
def test_the_trim_method_is_refused_before_anything_is_read_or_put(
    small: disks.DiskImage, tmp_path: Path, ebs: StandIn
) -> None:
    with _source(small, tmp_path) as device, pytest.raises(Failure) as failed:
        _copy(device, ebs, method="trim")
    (snapshot_id,) = ebs.snapshots
    assert str(failed.value) == (
        f"snapshot {snapshot_id} NOT completed, left pending until its timeout: "
        + snapshot_copy.NO_TRIM
    )
    assert "PutSnapshotBlock" not in ebs.writes.requests


# ---------------------------------------------------------------- units, no root


def test_verify_reads_a_block_again_masked_as_it_was_put(tmp_path: Path) -> None:
    path = tmp_path / "disk.img"
    path.write_bytes(b"\x01" * BLOCK + b"\x02" * 4096)
    fd = os.open(path, 0)
    try:
        source = Source(fd, BLOCK + 4096, None)
        remembered = snapshot_copy.Remembered(source)
        chosen = BlockSet([(512, 512), (BLOCK, 4096)], 2)
        assert [b.number for b in remembered.blocks(chosen)] == [0, 1]
        read = source.bytes_read
        assert remembered.again(0) == bytes(512) + b"\x01" * 512 + bytes(BLOCK - 1024)
        assert remembered.again(1) == b"\x02" * 4096 + bytes(BLOCK - 4096)
        assert source.bytes_read == read  # verify's reads are not the copy's
    finally:
        os.close(fd)


class Instance:
    """Stands in for the devices and the puts; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def find(self, volume_id: str, device_name: str | None) -> str:
        self.calls.append(("find", volume_id, device_name))
        return f"/dev/fake-{volume_id}"

    def put(self, options: SnapshotOptions) -> dict:
        self.calls.append(("put", options))
        return {
            "targetSnapshotId": options.snapshot_id,
            "source_bytes_read": 100,
            "target_bytes_written": 3 * BLOCK,
            "blocks_put": 3,
            "partitions": [{"number": 1, "fs": "ext4", "fsck": snapshot_copy.FSCK_NOT_RUN}],
            "verified": True,
        }

    def copy(self, options: object) -> dict:
        raise AssertionError("no copy onto a volume expected")

    def fetch(self, url: str, dest: str) -> None:
        raise AssertionError("no fetch expected")

    def steps(self) -> job.Steps:
        return job.Steps(
            self.find,
            self.copy,  # type: ignore[arg-type]
            self.fetch,
            put=self.put,  # type: ignore[arg-type]
        )


def _options(**changes: Any) -> job.JobOptions:
    options = job.JobOptions(
        ",".join(SOURCES),
        "",
        ",".join(NAMES),
        "",
        jobs=4,
        verify=True,
        target="snapshot",
        target_snapshot_ids=",".join(SNAPSHOTS),
    )
    return options._replace(**changes)


def test_the_job_puts_each_source_into_its_snapshot_in_job_order() -> None:
    instance = Instance()
    code, line = job.run(_options(), instance.steps())
    assert code == 0, line
    assert instance.calls == [
        call
        for source, name, snapshot in zip(SOURCES, NAMES, SNAPSHOTS, strict=True)
        for call in (
            ("find", source, name),
            ("put", SnapshotOptions(f"/dev/fake-{source}", snapshot, "allocated", 4, True, None)),
        )
    ]
    volumes = json.loads(line)["volumes"]
    assert [
        (v["sourceVolumeId"], v["targetVolumeId"], v["targetSnapshotId"], v["blocks_put"])
        for v in volumes
    ] == [(s, None, snap, 3) for s, snap in zip(SOURCES, SNAPSHOTS, strict=True)]
    assert volumes[0]["fsck"] == {"not_checked": 1}
    assert volumes[0]["target_bytes_written"] == 3 * BLOCK


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        (
            {"target_volume_ids": "vol-1111111111111111a,vol-1111111111111111b"},
            job.NO_TARGET_VOLUMES,
        ),
        ({"target_device_names": "/dev/sdp,/dev/sdq"}, job.NO_TARGET_VOLUMES),
        ({"target_snapshot_ids": SNAPSHOTS[0]}, job.SAME_COUNT_SNAPSHOT),
        ({"target_snapshot_ids": ""}, job.SAME_COUNT_SNAPSHOT),
        ({"target": "volume"}, job.NO_TARGET_SNAPSHOTS),
    ],
    ids=["target-volumes", "target-names", "short", "no-snapshots", "volume-with-snapshots"],
)
def test_lists_that_do_not_pair_up_are_refused_before_anything_runs(
    changes: dict[str, str], error: str
) -> None:
    instance = Instance()
    code, line = job.run(_options(**changes), instance.steps())
    assert (code, json.loads(line)) == (1, {"error": error, "sourceVolumeId": SOURCES[0]})
    assert instance.calls == []


def test_a_source_that_is_not_attached_names_the_snapshot_left_pending() -> None:
    instance = Instance()
    steps = instance.steps()

    def find(volume_id: str, device_name: str | None) -> str:
        if volume_id == SOURCES[1]:
            raise Failure(f"volume {volume_id} is not attached to this instance")
        return instance.find(volume_id, device_name)

    code, line = job.run(_options(), steps._replace(find=find))
    assert (code, json.loads(line)) == (
        1,
        {
            "error": f"sparsecopy: error: snapshot {SNAPSHOTS[1]} NOT completed, left pending "
            f"until its timeout: volume {SOURCES[1]} is not attached to this instance",
            "sourceVolumeId": SOURCES[1],
        },
    )
    assert [c[0] for c in instance.calls] == ["find", "put"]


def test_a_dry_run_with_target_snapshot_only_pairs_the_sources() -> None:
    inspected: list[str] = []

    def inspect(source: str, blocks: str | None) -> dict:
        inspected.append(source)
        return {"size": 1, "live_bytes": 1, "bytes_to_read": 1, "predicted_blocks": 1}

    instance = Instance()
    steps = instance.steps()._replace(inspect=inspect)
    options = _options(mode="inspect", target_snapshot_ids="", target_volume_ids=SOURCES[0])
    code, line = job.run(options, steps)
    assert code == 0, line
    assert inspected == [f"/dev/fake-{s}" for s in SOURCES]
    assert json.loads(line)["mode"] == "inspect"


def test_the_snapshot_fields_stay_within_the_volume_budget() -> None:
    huge = 2**63 - 1
    worst = {
        "targetSnapshotId": "snap-" + "f" * 10_000,
        "blocks_put": huge,
        "blocks_written": huge,
        "zero_blocks": huge,
        "source_bytes_read": huge,
        "target_bytes_written": huge,
        "outside_partitions_bytes": huge,
        "held_blocks": huge,
        "held_blocks_read": huge,
        "seconds": 999_999_999.999,
        "table": "x" * 10_000,
        "partitions": [{"method": "raw", "note": "n" * 5000}] * 1000,
    }
    entry = summary.volume_entry("vol-" + "f" * 10_000, None, worst)
    assert entry["targetVolumeId"] is None
    assert len(str(entry["targetSnapshotId"])) <= summary.ID_BUDGET
    assert len(summary.dumps(entry)) <= summary.VOLUME_BUDGET
    line, stderr = summary.join([SOURCES[0]], [None], [worst])
    assert len(line) <= summary.LINE_BOUND
    assert stderr[0].startswith(f"summary of volume 1/1 {SOURCES[0]} -> snap-ffff")
