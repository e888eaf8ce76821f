"""The one EBS emulator (devkit/ebs) over blocks in memory, called in-process: AWS's behaviours the
data-plane tests do not meet (the twin's tests meet them over its own store, test/twin/
test_ebs_direct_*.py), so that both stores are shown to carry the same emulator."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from devkit.ebs import wire
from devkit.ebs.api import Emulator
from devkit.ebs.quirks import Quirks
from devkit.ebs.store import MemoryStore
from devkit.ebs.wire import BLOCK, Request, linear_checksum


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """The emulator's clock, moved on by the test: now[0] seconds."""
    now = [1_000_000.0]
    monkeypatch.setattr(wire, "clock", lambda: now[0])
    yield now


def _call(emu: Emulator, method: str, path: str, query: str = "", body: bytes = b"",
          **headers: str) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    lower = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    answer = emu.handle(Request(method, path, query, lower, body))
    assert answer is not None, f"{method} {path} is one of the five calls"
    status, reply, data = answer
    return status, dict(reply), data


def _start(emu: Emulator, size_gib: int = 1, **spec: object) -> tuple[int, dict[str, object]]:
    status, _, body = _call(
        emu, "POST", "/snapshots", body=json.dumps({"VolumeSize": size_gib, **spec}).encode()
    )
    doc: dict[str, object] = json.loads(body)
    return status, doc


def _put(emu: Emulator, sid: str, index: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
    return _call(emu, "PUT", f"/snapshots/{sid}/blocks/{index}", body=data,
                 x_amz_data_length=str(len(data)), x_amz_checksum=digest,
                 x_amz_checksum_algorithm="SHA256")  # fmt: skip


def _complete(emu: Emulator, sid: str, blocks: dict[int, bytes]) -> int:
    digests = {i: hashlib.sha256(d).digest() for i, d in blocks.items()}
    status, _, _ = _call(emu, "POST", f"/snapshots/completion/{sid}",
                         x_amz_changedblockscount=str(len(blocks)),
                         x_amz_checksum=linear_checksum(digests), x_amz_checksum_algorithm="SHA256",
                         x_amz_checksum_aggregation_method="LINEAR")  # fmt: skip
    return status


def _error(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str, str]:
    status, headers, body = answer
    return status, headers["x-amzn-ErrorType"], str(json.loads(body).get("Reason", ""))


def _block(i: int) -> bytes:
    return bytes([i % 251 + 1]) * BLOCK


def test_a_new_snapshot_is_not_found_for_its_first_requests(clock: list[float]) -> None:
    emu = Emulator(MemoryStore(), Quirks(not_found_requests=2))
    _, started = _start(emu)
    sid = str(started["SnapshotId"])
    for _ in range(2):
        assert _error(_put(emu, sid, 0, _block(0))) == (
            404,
            "ResourceNotFoundException",
            "SNAPSHOT_NOT_FOUND",
        )
    assert _put(emu, sid, 0, _block(0))[0] == 201
    assert emu.writes.not_found_served == 2


def test_a_sealing_snapshot_is_not_found_by_the_read_calls_until_sealed(clock: list[float]) -> None:
    emu = Emulator(MemoryStore(), Quirks(seal_seconds=60, seal_not_found=True))
    sid = str(_start(emu)[1]["SnapshotId"])
    assert _put(emu, sid, 3, _block(3))[0] == 201
    assert _complete(emu, sid, {3: _block(3)}) == 202
    listed = _call(emu, "GET", f"/snapshots/{sid}/blocks")
    assert _error(listed) == (404, "ResourceNotFoundException", "SNAPSHOT_NOT_FOUND")
    clock[0] += 60
    status, _, body = _call(emu, "GET", f"/snapshots/{sid}/blocks")
    assert status == 200 and [b["BlockIndex"] for b in json.loads(body)["Blocks"]] == [3]
    assert emu.writes.seal_not_found_served == 1


def test_an_open_snapshot_past_its_timeout_is_error_and_takes_no_put(clock: list[float]) -> None:
    store = MemoryStore()
    emu = Emulator(store)
    sid = str(_start(emu, Timeout=10)[1]["SnapshotId"])
    clock[0] += 9 * 60
    assert _put(emu, sid, 0, _block(0))[0] == 201  # a put restarts the timeout
    clock[0] += 10 * 60 + 1
    assert _error(_put(emu, sid, 1, _block(1))) == (
        400,
        "ValidationException",
        "INVALID_SNAPSHOT_ID",
    )
    assert (
        store.snapshots[sid].status == "error" and "timeout" in store.snapshots[sid].state_message
    )


def test_the_pending_quota_refuses_a_start(clock: list[float]) -> None:
    emu = Emulator(MemoryStore(), Quirks(pending_snapshots=1))
    assert _start(emu)[0] == 201
    status, doc = _start(emu)
    assert (status, doc["Reason"]) == (402, "DEPENDENCY_SERVICE_QUOTA_EXCEEDED")


def test_a_lost_completion_seals_and_its_repeat_is_refused(clock: list[float]) -> None:
    emu = Emulator(MemoryStore(), Quirks(lost_completions=1, strict_completion=True))
    sid = str(_start(emu)[1]["SnapshotId"])
    _put(emu, sid, 0, _block(0))
    assert _complete(emu, sid, {0: _block(0)}) == 500
    assert emu.writes.snapshots[sid].sealed
    assert _complete(emu, sid, {0: _block(0)}) == 400
    assert emu.writes.completions_refused == 1


def test_a_child_snapshot_starts_with_its_parents_blocks_and_pages_them(clock: list[float]) -> None:
    emu = Emulator(MemoryStore(keep_data=False))
    parent = str(_start(emu)[1]["SnapshotId"])
    blocks = {i: _block(i) for i in range(0, 2 * 150, 2)}
    for i, data in blocks.items():
        assert _put(emu, parent, i, data)[0] == 201
    assert _complete(emu, parent, blocks) == 202
    clock[0] += 1
    status, started = _start(emu, 2, ParentSnapshotId=parent)
    assert status == 201 and started["ParentSnapshotId"] == parent
    child = str(started["SnapshotId"])
    assert _complete(emu, child, {}) == 202
    clock[0] += 1
    _, _, first = _call(emu, "GET", f"/snapshots/{child}/blocks", "maxResults=100")
    page = json.loads(first)
    _, _, second = _call(
        emu, "GET", f"/snapshots/{child}/blocks", "pageToken=" + quote(page["NextToken"])
    )
    listed = [b["BlockIndex"] for b in page["Blocks"] + json.loads(second)["Blocks"]]
    assert len(page["Blocks"]) == 100 and listed == sorted(blocks)
