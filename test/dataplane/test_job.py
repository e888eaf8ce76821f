"""``sparsecopy job``: the Command document's whole run (ssm-documents/sparsecopy/job.py).

The per-volume loop, the errors of each step with the volume they belong to, the one bounded
line, and the block lists fetched over HTTP (a local server) run here without root, the devices
and copies stood in for by recording fakes; the tests marked needs_root run the real job, from the
directory and zipped, on loop devices found through SPARSECOPY_BY_ID_DIR as on a Nitro instance.
"""

from __future__ import annotations

import contextlib
import errno
import http.server
import io
import json
import os
import socket
import subprocess
import tarfile
import threading
import zipapp
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PROGRAM,
    REPO,
    Run,
    attached,
    blank_like,
    follows_the_contract,
    sparsecopy,
)
from jsonschema import ValidationError
from sparsecopy import bundle, job, summary
from sparsecopy.device import BY_ID_PREFIX
from sparsecopy.disk_copy import CopyOptions
from sparsecopy.errors import Failure

SOURCES = ["vol-0000000000000000a", "vol-0000000000000000b", "vol-0000000000000000c"]
TARGETS = ["vol-1111111111111111a", "vol-1111111111111111b", "vol-1111111111111111c"]
SOURCE_NAMES = ["/dev/sdf", "/dev/sdg", "/dev/sdh"]
TARGET_NAMES = ["/dev/sdp", "/dev/sdq", "/dev/sdr"]
QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIAEXAMPLE%2F20260101%2Fus-east-1%2Fs3"
    "%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=0123abcd"
)
# volume 1 has no list (EBS would not list its snapshot): it is copied without one
LISTS = {
    "volume-0.json": {"BlockSize": 524288, "VolumeSize": 0, "BlockRanges": [[0, 3]]},
    "volume-2.json": {"BlockSize": 524288, "VolumeSize": 0, "BlockRanges": [[7, 1]]},
}


def _options(count: int = 3, **changes: Any) -> job.JobOptions:
    options = job.JobOptions(
        ",".join(SOURCES[:count]),
        ",".join(TARGETS[:count]),
        ",".join(SOURCE_NAMES[:count]),
        ",".join(TARGET_NAMES[:count]),
        method="trim",
        jobs=4,
        verify=False,
        scratch="/scratch",
    )
    return options._replace(**changes)


def _copy_summary(source: str, partitions: int = 2, note: str = "") -> dict:
    """What copy_disk returns; the byte counts follow the source device's last hex digit."""
    digit = int(source[-1], 16)
    parts = [
        {
            "number": n + 1,
            "start": (n + 1) << 20,
            "size": 1 << 30,
            "fs": "ntfs",
            "method": "raw",
            "allocated_bytes": 1 << 30,
            "fsck": "not checked: ntfs has no checker",
            **({"note": note} if note else {}),
        }
        for n in range(partitions)
    ]
    return {
        "source_bytes_read": 1000 * digit,
        "target_bytes_written": 42 * digit,
        "blocks_written": 7 * digit,
        "zero_blocks": digit,
        "partitions": parts,
        "verified": True,
        "seconds": 1.5,
        "table": "gpt",
        "outside_partitions_bytes": 1048576,
        "held_blocks": None,
        "held_blocks_read": None,
    }


class Instance:
    """Stands in for the devices and the copies; records every call in order."""

    def __init__(self, partitions: int = 2, note: str = "") -> None:
        self.calls: list[tuple] = []
        self.missing: set[str] = set()  # volume ids find cannot find
        self.failing: dict[str, BaseException] = {}  # source device -> what its copy raises
        self.lists: dict[str, object] = {}  # source device -> its block list as read in copy
        self.partitions = partitions
        self.note = note
        self.fetched: list[str] = []

    def find(self, volume_id: str, device_name: str | None) -> str:
        self.calls.append(("find", volume_id, device_name))
        if volume_id in self.missing:
            raise Failure(f"volume {volume_id} is not attached to this instance")
        return f"/dev/fake-{volume_id}"

    def copy(self, options: CopyOptions) -> dict:
        self.calls.append(("copy", options))
        if options.source_blocks:
            self.lists[options.source] = json.loads(Path(options.source_blocks).read_text())
        if options.source in self.failing:
            raise self.failing[options.source]
        return _copy_summary(options.source, self.partitions, self.note)

    def fetch(self, url: str, dest: str) -> None:
        self.fetched.append(url)
        raise AssertionError("no fetch expected")

    def steps(self, fetch: object = None) -> job.Steps:
        return job.Steps(self.find, self.copy, fetch or self.fetch)  # type: ignore[arg-type]


def _line(line: str) -> dict:
    assert "\n" not in line and line.isascii()
    return follows_the_contract(json.loads(line))


# ---------------------------------------------------------------- the volume loop


def test_each_volume_finds_both_devices_then_copies_in_job_order() -> None:
    instance = Instance()
    code, line = job.run(_options(), instance.steps())
    assert code == 0
    expected = []
    for source, target, source_name, target_name in zip(
        SOURCES, TARGETS, SOURCE_NAMES, TARGET_NAMES, strict=True
    ):
        copy = CopyOptions(
            f"/dev/fake-{source}", f"/dev/fake-{target}", "trim", "/scratch", 4, False, None
        )
        expected += [("find", source, source_name), ("find", target, target_name), ("copy", copy)]
    assert instance.calls == expected
    assert instance.fetched == []  # no URL: nothing fetched, no block lists
    volumes = _line(line)["volumes"]
    assert [(v["sourceVolumeId"], v["targetVolumeId"]) for v in volumes] == list(
        zip(SOURCES, TARGETS, strict=True)
    )
    assert [v["source_bytes_read"] for v in volumes] == [1000 * 10, 1000 * 11, 1000 * 12]
    assert volumes[0] == {
        "sourceVolumeId": SOURCES[0],
        "sourceConsistent": None,
        "targetVolumeId": TARGETS[0],
        "targetSnapshotId": None,
        "source_bytes_read": 10000,
        "target_bytes_written": 420,
        "blocks_put": None,
        "blocks_written": 70,
        "zero_blocks": 10,
        "outside_partitions_bytes": 1048576,
        "held_blocks": None,
        "held_blocks_read": None,
        "verified": True,
        "seconds": 1.5,
        "table": "gpt",
        "partition_count": 2,
        "methods": {"raw": 2},
        "fsck": {"not_checked": 2},
        "note_count": 0,
        "notes": [],
    }


def test_progress_and_every_partition_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = job.run(_options(), Instance().steps())
    err = capsys.readouterr().err
    assert code == 0
    assert f"sparsecopy: volume 2/3: {SOURCES[1]} -> {TARGETS[1]}" in err
    assert f"sparsecopy: copying /dev/fake-{SOURCES[1]} -> /dev/fake-{TARGETS[1]}" in err
    head = f"summary of volume 3/3 {SOURCES[2]} -> {TARGETS[2]}"
    assert f'sparsecopy: {head} partition 2: {{"number": 2, ' in err


@pytest.mark.parametrize(
    "field, value",
    [
        ("target_volume_ids", ",".join(TARGETS[:2])),
        ("source_device_names", ",".join([*SOURCE_NAMES, "/dev/sdi"])),
        ("target_device_names", TARGET_NAMES[0]),
    ],
)
def test_lists_of_different_lengths_are_refused_before_anything_runs(
    field: str, value: Any
) -> None:
    instance = Instance()
    code, line = job.run(_options(**{field: value}), instance.steps())
    assert code == 1
    assert _line(line) == {"error": job.SAME_COUNT, "sourceVolumeId": SOURCES[0]}
    assert instance.calls == []


def test_more_volumes_than_a_job_has_are_refused() -> None:
    ids = ",".join(f"vol-{i:017x}" for i in range(11))
    names = ",".join(["/dev/sdf"] * 11)
    instance = Instance()
    code, line = job.run(job.JobOptions(ids, ids, names, names), instance.steps())
    assert code == 1
    assert _line(line) == {
        "error": "11 volumes: a job has 1 to 10",
        "sourceVolumeId": "vol-" + "0" * 17,
    }
    assert instance.calls == []


# ---------------------------------------------------------------- errors, each with its volume


def test_a_target_that_cannot_be_found_fails_its_volume_before_its_copy() -> None:
    instance = Instance()
    instance.missing.add(TARGETS[1])
    code, line = job.run(_options(), instance.steps())
    assert code == 1
    assert _line(line) == {
        "error": f"sparsecopy: error: volume {TARGETS[1]} is not attached to this instance",
        "sourceVolumeId": SOURCES[1],  # the pair's source names the volume
    }
    assert [c[0] for c in instance.calls] == ["find", "find", "copy", "find", "find"]


@pytest.mark.parametrize(
    "raised, error",
    [
        (
            Failure('read error on "/dev/x" at 4096'),
            'sparsecopy: error: read error on "/dev/x" at 4096',
        ),
        (RuntimeError("boom"), "sparsecopy: error: internal error: RuntimeError: boom"),
        (KeyboardInterrupt(), "sparsecopy: error: interrupted"),
    ],
)
def test_a_failed_copy_is_the_error_line_of_its_volume_and_stops_the_job(
    raised: BaseException, error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = Instance()
    instance.failing[f"/dev/fake-{SOURCES[1]}"] = raised
    code, line = job.run(_options(), instance.steps())
    assert code == 1
    assert _line(line) == {"error": error, "sourceVolumeId": SOURCES[1]}
    assert not any(c[1] == SOURCES[2] for c in instance.calls)  # the third volume never started
    assert capsys.readouterr().err.splitlines()[-1] == error  # the same line on stderr


def test_a_very_long_error_is_cut_to_1000_printable_characters() -> None:
    instance = Instance()
    instance.failing[f"/dev/fake-{SOURCES[0]}"] = Failure("read error " + 'é"\\\n' * 2000)
    code, line = job.run(_options(), instance.steps())
    assert code == 1
    assert len(line) <= summary.ERROR_LINE_BOUND == 1064
    error = _line(line)["error"]
    assert error.startswith('sparsecopy: error: read error \\xe9"\\?\\xe9')  # as the bash did
    assert error.endswith("...")
    assert 990 < len(json.dumps(error)) - 2 <= 1000


def test_an_unexpected_failure_after_the_copies_is_still_one_error_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_args: object) -> tuple[str, list[str]]:
        raise ValueError("summary line of 30000 characters exceeds 20023")

    monkeypatch.setattr(job, "join", broken)
    code, line = job.run(_options(), Instance().steps())
    assert code == 1
    assert _line(line) == {
        "error": "sparsecopy: error: internal error: ValueError: summary line of 30000 "
        "characters exceeds 20023",
        "sourceVolumeId": SOURCES[0],
    }


# ---------------------------------------------------------------- the line's bounds


def test_10_volumes_of_128_partitions_with_long_notes_stay_one_line_under_24000() -> None:
    ids = [f"vol-{i:017x}" for i in range(10)]
    targets = [f"vol-{i + 0x100:017x}" for i in range(10)]
    names = ",".join(f"/dev/sd{chr(ord('f') + i)}" for i in range(10))
    instance = Instance(partitions=128, note="dirty NTFS volume, copied raw " * 100)
    options = job.JobOptions(",".join(ids), ",".join(targets), names, names)
    code, line = job.run(options, instance.steps())
    assert code == 0
    assert len(line) <= summary.LINE_BOUND < summary.STDOUT_LIMIT
    volumes = _line(line)["volumes"]
    assert [v["sourceVolumeId"] for v in volumes] == ids
    for volume in volumes:
        assert len(summary.dumps(volume)) <= summary.VOLUME_BUDGET
        assert volume["partition_count"] == 128 and volume["note_count"] == 128
        assert 0 < len(volume["notes"]) < 128
        assert all(len(json.dumps(note)) - 2 <= summary.NOTE_BUDGET for note in volume["notes"])


def _rich_summary(digit: int, partitions: int, note: str) -> dict:
    """A copy summary with every method, both fsck outcomes and a note on each partition."""
    parts = [
        {
            "number": n + 1,
            "start": (n + 1) << 20,
            "size": 1 << 30,
            "fs": "ntfs",
            "method": ("raw", "allocated", "header", "odd")[n % 4],
            "allocated_bytes": 1 << 30,
            "fsck": "clean" if n % 2 else "not checked: ntfs has no checker",
            **({"note": f"{n + 1}: {note}"} if note else {}),
        }
        for n in range(partitions)
    ]
    return {
        "source_bytes_read": 1000 * digit + 7,
        "target_bytes_written": 42 * digit,
        "partitions": parts,
        "verified": True,
        "seconds": 12.3456,
        "table": "gpt",
        "outside_partitions_bytes": 1048576,
    }


def test_join_of_10_volumes_of_128_partitions_with_odd_notes_stays_under_24000() -> None:
    # notes with quotes, control characters and astral characters: 12 JSON characters each
    note = 'dirty "NTFS"\t\U0001f4be volume, copied raw ' * 200
    sources = [f"vol-{i:017x}" for i in range(10)]
    targets = [f"vol-{i + 0x100:017x}" for i in range(10)]
    line, stderr = summary.join(sources, targets, [_rich_summary(i, 128, note) for i in range(10)])
    assert len(line) <= summary.LINE_BOUND < summary.STDOUT_LIMIT
    volumes = _line(line)["volumes"]
    assert len(volumes) == 10
    for i, volume in enumerate(volumes):
        assert len(summary.dumps(volume)) <= summary.VOLUME_BUDGET
        # what report/build.py reads, by the pair's source volume id
        assert volume["sourceVolumeId"] == sources[i]
        assert volume["targetVolumeId"] == targets[i]
        assert volume["source_bytes_read"] == 1000 * i + 7
        assert volume["target_bytes_written"] == 42 * i
        assert volume["partition_count"] == 128
        assert volume["methods"] == {"allocated": 32, "header": 32, "other": 32, "raw": 32}
        assert volume["fsck"] == {"clean": 64, "not_checked": 64}
        assert volume["note_count"] == 128
        assert volume["seconds"] == 12.346 and volume["verified"] is True
        assert 0 < len(volume["notes"]) < 128  # as many as fit, in partition order
        for n, text in enumerate(volume["notes"]):
            assert text.startswith(f"partition {n + 1} (ntfs, ")
            assert text.endswith("...")
            assert len(json.dumps(text)) - 2 <= summary.NOTE_BUDGET
    # every partition's full details, notes uncut, are for standard error
    for i in range(10):
        head = f"summary of volume {i + 1}/10 {sources[i]} -> {targets[i]}"
        assert any(s.startswith(f"{head} partition 128: ") for s in stderr)
        assert any(json.dumps(f"128: {note}") in s for s in stderr)


def test_entry_fixed_fields_fit_the_volume_budget_at_their_largest() -> None:
    """Everything but the notes is bounded by construction; the notes fill what is left."""
    huge = 2**63 - 1
    worst = {
        "source_bytes_read": huge,
        "target_bytes_written": huge,
        "blocks_written": huge,
        "zero_blocks": huge,
        "outside_partitions_bytes": huge,
        "held_blocks": huge,
        "held_blocks_read": huge,
        "verified": True,
        "seconds": 999_999_999.999,
        "table": "x" * 10_000,
        "partitions": [
            {"method": m, "fsck": f, "note": "n" * 5000}
            for m in ("allocated", "trim", "raw", "header", "odd" * 1000)
            for f in ("clean", "not checked: " + "y" * 1000)
        ]
        * 100,
    }
    long_id = "vol-" + "f" * 10_000
    without_notes = summary.volume_entry(long_id, long_id, {**worst, "partitions": []})
    assert len(summary.dumps(without_notes)) < summary.VOLUME_BUDGET // 2
    entry = summary.volume_entry(long_id, long_id, worst)
    assert len(summary.dumps(entry)) > summary.VOLUME_BUDGET - summary.NOTE_BUDGET - 3
    assert len(summary.dumps(entry)) <= summary.VOLUME_BUDGET
    assert entry["partition_count"] == 1000 and entry["note_count"] == 1000
    # values that are not what sparsecopy prints are dropped, not passed through at any length
    odd = summary.volume_entry(
        "vol-1", "vol-2", {"source_bytes_read": "9" * 5000, "seconds": 1e300}
    )
    assert odd["source_bytes_read"] is None and odd["seconds"] is None
    assert summary.MAX_VOLUMES * summary.VOLUME_BUDGET + 23 == summary.LINE_BOUND < 24_000


def test_entry_says_whether_the_source_was_consistent_and_how_verify_judged() -> None:
    """sourceConsistent passes through as a boolean (anything else is null); a partition whose
    copy the checker finds exactly as inconsistent as its source counts as "as_source"."""
    parts = [
        {"method": "raw", "fsck": "as the source: e2fsck finds the same 3 problem(s) on both"},
        {"method": "allocated", "fsck": "clean"},
        {"method": "raw", "fsck": "not checked: unknown is not a filesystem with a checker"},
    ]
    entry = summary.volume_entry("vol-1", "vol-2", {"sourceConsistent": False, "partitions": parts})
    assert entry["sourceConsistent"] is False
    assert entry["fsck"] == {"as_source": 1, "clean": 1, "not_checked": 1}
    assert summary.volume_entry("vol-1", "vol-2", {"sourceConsistent": True})["sourceConsistent"]
    assert (
        summary.volume_entry("vol-1", "vol-2", {"sourceConsistent": "no"})["sourceConsistent"]
        is None
    )


def test_clip_counts_json_escaped_characters() -> None:
    assert summary.clip("short", 10) == "short"
    for text in ('"\\' * 50, "\x00" * 50, "\U0001f4be" * 50, "é" * 50):
        clipped = summary.clip(text, 40)
        assert clipped.endswith("...")
        assert 40 - 12 < len(json.dumps(clipped)) - 2 <= 40
    line = summary.error_line("e\u2028" * 100_000, "vol-" + "0" * 1000)
    assert len(line) <= summary.ERROR_LINE_BOUND
    assert json.loads(line)["error"].endswith("...")


def test_join_passes_the_held_counts_through() -> None:
    with_list: dict[str, object] = {
        "source_bytes_read": 5,
        "held_blocks": 1234,
        "held_blocks_read": 1000,
    }
    without: dict[str, object] = {
        "source_bytes_read": 5,
        "held_blocks": None,
        "held_blocks_read": None,
    }
    line, _ = summary.join(
        ["vol-1", "vol-2", "vol-3"], ["vol-a", "vol-b", "vol-c"], [with_list, without, {}]
    )
    volumes = json.loads(line)["volumes"]
    assert [(v["held_blocks"], v["held_blocks_read"]) for v in volumes] == [
        (1234, 1000),
        (None, None),
        (None, None),
    ]


def test_join_refuses_summaries_that_do_not_pair_up() -> None:
    with pytest.raises(ValueError, match="they must match"):
        summary.join(["vol-1", "vol-2"], ["vol-a", "vol-b"], [{}])


def test_main_prints_only_the_line_on_stdout_whatever_children_print(
    capfd: pytest.CaptureFixture[str],
) -> None:
    instance = Instance()

    def noisy_copy(options: CopyOptions) -> dict:
        subprocess.run(["echo", "a tool writing on stdout"], check=True)
        print("a print on stdout", flush=True)
        return instance.copy(options)

    code = job.main(_options(), job.Steps(instance.find, noisy_copy, instance.fetch))
    out, err = capfd.readouterr()
    assert code == 0
    assert len(out.splitlines()) == 1 and "volumes" in _line(out.strip())
    assert "a tool writing on stdout" in err and "a print on stdout" in err


# ---------------------------------------------------------------- block lists over HTTP


def _bundle(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.name = name.rstrip("/")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


GOOD_BUNDLE = _bundle({name: json.dumps(doc).encode() for name, doc in LISTS.items()})


class Server:
    """A local HTTP server: ``answers`` maps a path to a list of (status, headers, body), one
    per request (the last one repeats); ``requests`` records each request's path and query."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, dict[str, str], bytes]]] = {}
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                queue = server.answers.get(self.path.split("?")[0], [(404, {}, b"no such key")])
                status, headers, body = queue.pop(0) if len(queue) > 1 else queue[0]
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.close()


def _fetching(delays: list[float]) -> object:
    """bundle.fetch, waiting no time between attempts (the delays are recorded)."""
    return lambda url, dest: bundle.fetch(url, dest, sleep=delays.append)


def test_each_listed_volume_gets_its_own_list_and_the_presigned_query_arrives_whole(
    server: Server,
) -> None:
    server.answers["/exec-1/source-blocks.tar.gz"] = [(200, {}, GOOD_BUNDLE)]
    instance = Instance()
    url = f"{server.base}/exec-1/source-blocks.tar.gz?{QUERY}"
    code, line = job.run(_options(source_blocks_url=url), instance.steps(_fetching([])))
    assert code == 0, line
    assert server.requests == [f"/exec-1/source-blocks.tar.gz?{QUERY}"]
    assert instance.lists == {
        f"/dev/fake-{SOURCES[0]}": LISTS["volume-0.json"],
        f"/dev/fake-{SOURCES[2]}": LISTS["volume-2.json"],
    }
    copies = [c[1] for c in instance.calls if c[0] == "copy"]
    assert [Path(c.source_blocks).name if c.source_blocks else None for c in copies] == [
        "volume-0.json",
        None,
        "volume-2.json",
    ]
    assert not any(Path(c.source_blocks).exists() for c in copies if c.source_blocks)  # cleaned


def test_transient_answers_are_tried_again_1_2_4_8_16_seconds_apart(server: Server) -> None:
    server.answers["/b.tar.gz"] = [
        (503, {}, b"SlowDown"),
        (500, {}, b"InternalError"),
        (200, {}, GOOD_BUNDLE),
    ]
    delays: list[float] = []
    instance = Instance()
    code, _ = job.run(
        _options(source_blocks_url=f"{server.base}/b.tar.gz"), instance.steps(_fetching(delays))
    )
    assert code == 0
    assert delays == [1, 2] and len(server.requests) == 3
    server.answers["/always.tar.gz"] = [(503, {}, b"SlowDown")]
    delays.clear()
    code, line = job.run(
        _options(source_blocks_url=f"{server.base}/always.tar.gz"),
        Instance().steps(_fetching(delays)),
    )
    assert code == 1
    assert delays == [1, 2, 4, 8, 16]  # curl --retry 5
    assert _line(line)["error"] == f"{bundle.FETCH_FAILED}: HTTP 503 Service Unavailable"


def test_a_missing_bundle_fails_at_once_naming_the_block_lists(server: Server) -> None:
    delays: list[float] = []
    instance = Instance()
    url = f"{server.base}/exec-1/gone.tar.gz?{QUERY}"
    code, line = job.run(_options(source_blocks_url=url), instance.steps(_fetching(delays)))
    assert code == 1
    assert _line(line) == {
        "error": "could not fetch the source block lists (does the subnet reach S3? a gateway "
        "endpoint or NAT): HTTP 404 Not Found",
        "sourceVolumeId": SOURCES[0],
    }
    assert delays == [] and len(server.requests) == 1  # a 404 is not tried again
    assert instance.calls == []  # nothing looked up, nothing copied


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_is_tried_again_then_names_the_route_to_s3() -> None:
    delays: list[float] = []
    url = f"http://127.0.0.1:{_closed_port()}/b.tar.gz"
    code, line = job.run(_options(source_blocks_url=url), Instance().steps(_fetching(delays)))
    assert code == 1
    assert delays == [1, 2, 4, 8, 16]  # --retry-connrefused
    error = _line(line)["error"]
    assert error.startswith(bundle.FETCH_FAILED + ": ")
    assert os.strerror(errno.ECONNREFUSED) in error


def test_a_server_that_never_answers_times_out_each_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bundle, "CONNECT_SECONDS", 0.2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(10)  # accepts connections, never answers
        delays: list[float] = []
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/b.tar.gz"
        code, line = job.run(_options(source_blocks_url=url), Instance().steps(_fetching(delays)))
    assert code == 1
    assert delays == [1, 2, 4, 8, 16]
    assert _line(line)["error"] == f"{bundle.FETCH_FAILED}: timed out"


def test_a_body_that_is_not_a_gzip_tar_cannot_be_unpacked(server: Server) -> None:
    server.answers["/b.tar.gz"] = [(200, {}, b"<Error>AccessDenied</Error>")]
    instance = Instance()
    code, line = job.run(
        _options(source_blocks_url=f"{server.base}/b.tar.gz"), instance.steps(_fetching([]))
    )
    assert code == 1
    assert _line(line) == {
        "error": "could not unpack the source block lists: not a gzip file",
        "sourceVolumeId": SOURCES[0],
    }
    assert instance.calls == []


def test_only_volume_files_are_unpacked_and_nothing_lands_outside(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    archive.write_bytes(
        _bundle(
            {
                "volume-1.json": b"{}",
                "../volume-2.json": b"{}",
                "/etc/volume-3.json": b"{}",
                "volume-4.json/": b"",
                "sub/volume-5.json": b"{}",
                "volume-06.json": b"{}",
                "notes.txt": b"x",
            }
        )
    )
    out = tmp_path / "blocks"
    out.mkdir()
    assert bundle.unpack(str(archive), str(out)) == {1: str(out / "volume-1.json")}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["b.tar.gz", "blocks", "volume-1.json"]


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/b.tar.gz",
        "http://10.0.0.1/b.tar.gz",
        "ftp://127.0.0.1/b",
        "file:///etc/passwd",
    ],
)
def test_only_https_or_http_to_this_machine_is_fetched(url: str, tmp_path: Path) -> None:
    with pytest.raises(Failure, match="neither https nor http to a loopback host"):
        bundle.fetch(url, str(tmp_path / "b"), sleep=lambda _s: None)
    assert not (tmp_path / "b").exists()


def test_redirects_are_followed_but_never_away_from_https_or_loopback(server: Server) -> None:
    server.answers["/moved"] = [(307, {"Location": "/exec-1/b.tar.gz"}, b"")]
    server.answers["/exec-1/b.tar.gz"] = [(200, {}, GOOD_BUNDLE)]
    server.answers["/away"] = [(302, {"Location": "http://example.com/b.tar.gz"}, b"")]
    instance = Instance()
    code, _ = job.run(
        _options(source_blocks_url=f"{server.base}/moved"), instance.steps(_fetching([]))
    )
    assert code == 0 and len(instance.lists) == 2  # --location
    code, line = job.run(
        _options(source_blocks_url=f"{server.base}/away"), Instance().steps(_fetching([]))
    )
    assert code == 1
    assert "http://example.com is neither https nor http to a loopback host" in _line(line)["error"]


# ---------------------------------------------------------------- the real job on loop devices

CHUNK = 512 * 1024


def _disk(path: Path, chunks: dict[int, int]) -> Path:
    """A 8 MiB disk without a table (copied as unknown data): chunk index -> fill byte."""
    with open(path, "wb") as f:
        f.truncate(16 * CHUNK)
        for index, fill in chunks.items():
            f.seek(index * CHUNK + 4096)
            f.write(bytes([fill]) * 8192)
    return path


@contextlib.contextmanager
def _instance(tmp_path: Path, disks: dict[str, Path]) -> Iterator[Path]:
    """The volumes attached as loop devices, linked by serial as udev does on Nitro."""
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    with contextlib.ExitStack() as stack:
        for volume_id, path in disks.items():
            device = stack.enter_context(attached(path))
            (by_id / (BY_ID_PREFIX + volume_id.replace("-", ""))).symlink_to(device)
        yield by_id


def _run_job(by_id: Path, count: int, *extra: str, program: Path = PROGRAM) -> Run:
    return sparsecopy(
        "job",
        "--source-volume-ids",
        ",".join(SOURCES[:count]),
        "--target-volume-ids",
        ",".join(TARGETS[:count]),
        "--source-device-names",
        ",".join(SOURCE_NAMES[:count]),
        "--target-device-names",
        ",".join(TARGET_NAMES[:count]),
        *extra,
        program=program,
        env={"SPARSECOPY_BY_ID_DIR": str(by_id)},
    )


@pytest.mark.needs_root
def test_the_zipped_job_copies_every_volume_with_its_block_list(
    tmp_path: Path, server: Server
) -> None:
    sources = [_disk(tmp_path / "a.img", {0: 1, 2: 2, 9: 3}), _disk(tmp_path / "b.img", {5: 4})]
    targets = [blank_like(s, tmp_path / f"target-{s.name}") for s in sources]
    # volume 0's list holds chunks 0-2 only: chunk 9's data is not read, not written
    server.answers["/b.tar.gz"] = [
        (200, {}, _bundle({"volume-0.json": json.dumps(LISTS["volume-0.json"]).encode()}))
    ]
    pyz = tmp_path / "sparsecopy.pyz"
    zipapp.create_archive(PROGRAM, pyz)
    volumes = dict(zip(SOURCES[:2] + TARGETS[:2], sources + targets, strict=True))
    with _instance(tmp_path, volumes) as by_id:
        run = _run_job(
            by_id,
            2,
            "--verify",
            "true",
            "--source-blocks-url",
            f"{server.base}/b.tar.gz",
            program=pyz,
        )
    assert run.returncode == 0, run.stderr
    first, second = follows_the_contract(run.summary)["volumes"]
    assert (first["sourceVolumeId"], first["held_blocks"], first["verified"]) == (
        SOURCES[0],
        3,
        True,
    )
    assert (second["sourceVolumeId"], second["held_blocks"]) == (SOURCES[1], None)
    # unknown data: every held block (0-2, block 1 all zeros) / every block without a list
    assert (first["blocks_written"], first["zero_blocks"]) == (3, 1)
    assert first["target_bytes_written"] == 3 * CHUNK
    assert (second["blocks_written"], second["zero_blocks"]) == (16, 15)
    assert second["target_bytes_written"] == 16 * CHUNK
    assert targets[1].read_bytes() == sources[1].read_bytes()
    expected = bytearray(sources[0].read_bytes())
    expected[9 * CHUNK : 10 * CHUNK] = bytes(CHUNK)
    assert targets[0].read_bytes() == bytes(expected)


@pytest.mark.needs_root
def test_the_job_names_the_volume_whose_target_is_not_blank(tmp_path: Path) -> None:
    sources = [_disk(tmp_path / "a.img", {1: 1}), _disk(tmp_path / "b.img", {1: 2})]
    targets = [blank_like(sources[0], tmp_path / "ta.img"), _disk(tmp_path / "tb.img", {0: 9})]
    with _instance(
        tmp_path, dict(zip(SOURCES[:2] + TARGETS[:2], sources + targets, strict=True))
    ) as by_id:
        run = _run_job(by_id, 2)
    assert run.returncode == 1
    line = follows_the_contract(run.summary)
    assert line["sourceVolumeId"] == SOURCES[1]
    assert line["error"].startswith("sparsecopy: error: target /dev/loop")
    assert line["error"].endswith(
        "is not blank (data at byte 0..1048576): copy only onto a new, never-written volume"
    )
    assert targets[0].read_bytes() == sources[0].read_bytes()  # the first volume was copied


@pytest.mark.needs_root
def test_the_job_names_a_volume_that_is_not_attached(tmp_path: Path) -> None:
    with _instance(tmp_path, {SOURCES[0]: _disk(tmp_path / "a.img", {1: 1})}) as by_id:
        run = _run_job(by_id, 1)
    assert run.returncode == 1
    assert follows_the_contract(run.summary) == {
        "error": f"sparsecopy: error: volume {TARGETS[0]} is not attached to this instance (no "
        f"NVMe device with serial {TARGETS[0].replace('-', '')} or as /dev/sdp): attach it or "
        "wait for the attachment to finish",
        "sourceVolumeId": SOURCES[0],
    }


@pytest.mark.needs_root
def test_the_job_line_keeps_what_the_report_reads_from_a_real_copy(tmp_path: Path) -> None:
    source = _disk(tmp_path / "a.img", {0: 1, 3: 2, 15: 3})
    by_copy, by_job = (
        blank_like(source, tmp_path / "t1.img"),
        blank_like(source, tmp_path / "t2.img"),
    )
    with attached(source) as src, attached(by_copy) as dst:
        copied = sparsecopy("copy", src, dst, "--verify")
    assert copied.returncode == 0, copied.stderr
    with _instance(tmp_path, {SOURCES[0]: source, TARGETS[0]: by_job}) as by_id:
        run = _run_job(by_id, 1)
    assert run.returncode == 0, run.stderr
    (volume,) = follows_the_contract(run.summary)["volumes"]
    full = copied.summary
    for key in ("source_bytes_read", "target_bytes_written", "outside_partitions_bytes", "table"):
        assert volume[key] == full[key]
    assert volume["verified"] is True
    assert volume["partition_count"] == len(full["partitions"])
    assert by_job.read_bytes() == by_copy.read_bytes() == source.read_bytes()


def test_the_recorded_real_runs_follow_the_contract() -> None:
    """The twin's recording of real jobs on loop devices (twin/data_plane_recording.json, made
    by `sudo make twin-record`): each line is one check_compaction accepts."""
    runs = json.loads((REPO / "twin" / "data_plane_recording.json").read_text())["runs"]
    assert runs
    for name, run in runs.items():
        (line,) = run["stdout"].splitlines()
        assert _line(line)["volumes"], name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"held_blocks": -1}, "less than the minimum"),
        ({"seconds": "1.5"}, "is not of type"),
        ({"extra": 1}, "Additional properties"),
    ],
)
def test_a_line_the_contract_does_not_describe_fails_the_check(change: dict, message: str) -> None:
    line, _ = summary.join(SOURCES[:1], TARGETS[:1], [_rich_summary(1, 2, "")])
    parsed = json.loads(line)
    parsed["volumes"][0] |= change
    with pytest.raises(ValidationError, match=message):
        follows_the_contract(parsed)
