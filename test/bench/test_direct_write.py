"""The direct-write benchmark's small part (no root, no loop devices, no timed assertions): the
stand-in in its own process, put-snapshot of a small data image into it, and the report."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.direct_write import (
    PARTIAL_BLOCKS,
    VOLUME_ID,
    ZERO_BLOCKS,
    Run,
    build_image,
    compare_blocks,
    data_layout,
    held_blocks,
    job_once,
    put_once,
)
from bench.ebs_server import StandInProcess
from devkit.chunks import CHUNK

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "ssm-documents" / "sparsecopy"
MIB = 1 << 20


def _independent_held_blocks(image: Path, zero_blocks: list[int]) -> dict[int, str]:
    """Every 512 KiB block of the file read plainly (no SEEK_DATA), the non-zero ones and the
    blocks written with zeros (data_layout's) hashed."""
    found = {}
    with image.open("rb") as f:
        index = 0
        while block := f.read(CHUNK):
            if block.count(0) != len(block) or index in zero_blocks:
                found[index] = hashlib.sha256(block.ljust(CHUNK, b"\0")).hexdigest()
            index += 1
    return found


def _held(image: Path, size: int, data: int, seed: int) -> dict[int, str]:
    return _independent_held_blocks(image, data_layout(size, data, seed)[1])


def test_the_data_image_holds_runs_partial_blocks_and_written_zero_blocks(tmp_path: Path) -> None:
    image = tmp_path / "data.img"
    expected = build_image(image, 32 * MIB, 4 * MIB, seed=3)
    runs, zero_blocks = data_layout(32 * MIB, 4 * MIB, seed=3)
    assert len(zero_blocks) == ZERO_BLOCKS
    assert sum(1 for _, count in runs if count == 0) == PARTIAL_BLOCKS
    assert len(expected) == 4 * MIB // CHUNK + PARTIAL_BLOCKS + ZERO_BLOCKS
    assert held_blocks(image) == expected == _independent_held_blocks(image, zero_blocks)
    # the zero blocks are allocated (a reader that trusted SEEK_DATA alone would put them)
    with image.open("rb") as f:
        for index in zero_blocks:
            assert os.lseek(f.fileno(), index * CHUNK, os.SEEK_DATA) == index * CHUNK


def test_compare_blocks_names_missing_extra_and_different_blocks() -> None:
    assert compare_blocks({1: "a", 2: "b"}, {1: "a", 2: "b"}) == []
    problems = compare_blocks({1: "a", 2: "b", 3: "c"}, {1: "a", 2: "x", 4: "d"})
    assert problems == [
        "1 missing block(s), e.g. [3]",
        "1 extra block(s), e.g. [4]",
        "1 different block(s), e.g. [2]",
    ]


def test_put_snapshot_into_the_stand_in_process_holds_exactly_the_held_blocks(
    tmp_path: Path,
) -> None:
    image = tmp_path / "data.img"
    build_image(image, 48 * MIB, 6 * MIB, seed=5)
    run = Run("direct", latency_ms=5, max_concurrency=4, jobs=4)
    got = put_once(PROGRAM, image, 1, run, tmp_path / "log")
    assert got == _held(image, 48 * MIB, 6 * MIB, seed=5)
    assert run.blocks == len(got) == 6 * MIB // CHUNK + PARTIAL_BLOCKS + ZERO_BLOCKS
    assert run.max_puts_in_flight is not None and 1 <= run.max_puts_in_flight <= 4
    assert run.rejected == 0 and run.problems == []
    assert run.put_seconds is not None and run.put_seconds > 0
    assert run.standin_cpu_seconds is not None and len(run.seconds_runs) == 1


@pytest.mark.needs_root  # a loop device as the source volume
def test_the_job_in_snapshot_mode_puts_exactly_the_held_blocks(tmp_path: Path) -> None:
    image = tmp_path / "data.img"
    build_image(image, 40 * MIB, 5 * MIB, seed=4)
    run = Run("job", latency_ms=5, max_concurrency=8, jobs=3)
    work = tmp_path / "work"
    work.mkdir()
    got = job_once(PROGRAM, image, work, run, tmp_path / "log")
    assert got == _held(image, 40 * MIB, 5 * MIB, seed=4)
    assert run.blocks == 5 * MIB // CHUNK + PARTIAL_BLOCKS + ZERO_BLOCKS and run.problems == []
    # the stand-in's limit caps what is in flight (the job keeps more puts going than --jobs;
    # refused ones are retried and the snapshot still holds exactly the blocks)
    assert run.max_puts_in_flight is not None and 1 <= run.max_puts_in_flight <= 8
    log = (tmp_path / "log").read_text()
    assert f"{VOLUME_ID} -> snap-" in log and "--target snapshot" in log
    assert not (work / "by-id").exists()  # the loop device is detached, its link removed
    assert (
        str(image) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    )


def test_the_stand_in_runs_in_its_own_process_and_counts_rejections(tmp_path: Path) -> None:
    image = tmp_path / "data.img"
    build_image(image, 16 * MIB, 4 * MIB, seed=9)
    with StandInProcess(latency=0.02, max_concurrency=2) as ebs:
        assert ebs.pid != os.getpid()
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "AKIDTEST",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_EBS": ebs.url,
        }
        cmd = ["python3", str(PROGRAM), "put-snapshot", str(image), "--size-gib", "1"]
        proc = subprocess.run(
            [*cmd, "--jobs", "6"], capture_output=True, text=True, env=env, check=False
        )
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        stats = ebs.stats()
    # six connections against a limit of two: the excess is refused and retried
    assert stats["rejected"] > 0 and stats["max_in_flight"] == 2
    snapshot = stats["snapshots"][summary["snapshotId"]]
    assert snapshot["status"] == "completed"
    held = _held(image, 16 * MIB, 4 * MIB, seed=9)
    assert {int(i): d for i, d in snapshot["blocks"].items()} == held


def test_the_bench_command_writes_a_report_with_every_field(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bench.direct_write", "--paths", "read,direct", "--size", "24M"]
    cmd += ["--data", "3M", "--latency-ms", "0,5", "--jobs", "3", "--max-concurrency", "8"]
    proc = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["cpus"] == os.cpu_count()
    assert doc["config"]["data_blocks"] == 3 * MIB // CHUNK + PARTIAL_BLOCKS + ZERO_BLOCKS
    paths = [(r["path"], r["latency_ms"]) for r in doc["runs"]]
    assert paths == [("read", None), ("direct", 0), ("direct", 5)]
    assert doc["runs"][0]["verified"] is True
    for run in doc["runs"][1:]:
        assert run["verified"] is True, run
        assert run["blocks"] == doc["config"]["data_blocks"]
        for key in ("seconds", "put_seconds", "mean_puts_in_flight", "max_puts_in_flight"):
            assert isinstance(run[key], (int, float)), key
    report = (out / "report.md").read_text()
    assert "STAND-IN" in report and "MB/s" in report and "puts in flight" in report
    assert not (out / "work").exists()


@pytest.mark.parametrize("bad", [["--data", "9M", "--size", "8M"], ["--paths", "tape"]])
def test_bad_arguments_are_refused(tmp_path: Path, bad: list[str]) -> None:
    cmd = [sys.executable, "-m", "bench.direct_write", *bad, "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "--paths from" in proc.stderr
