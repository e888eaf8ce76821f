"""check_compaction keeps the data plane's last progress line (issue #10): read from the tail of
the command's stderr stream in COMMAND_LOG_GROUP, never from GetCommandInvocation's output
(empty while the command runs, then only its first 8,000/24,000 characters), carried forward
from the previous poll, and never the reason a poll fails."""

from __future__ import annotations

import json
from typing import Any

import pytest
from compactor import aws
from compactor.handlers import check_compaction
from compactor.ssm import progress
from conftest import World
from support import capture, error_response, instance_result, respond, summary_volume

GROUP = "/compactor-test/commands"  # conftest's COMMAND_LOG_GROUP
COMMAND = {"commandId": "0b6f7a2e-1111-4c1e-9a3b-0123456789ab", "directSnapshots": []}
PLUGIN = "compactVolumes"  # the document's step name: PluginName of a 2.2 document's invocation
T0 = 1_795_000_000_000  # ms


def line(phase: str, percent: str, done: int, total: int, eta: str = "0:07") -> str:
    return (
        f"sparsecopy: {phase}: {percent:>5}% 1.0 MiB of 2.0 MiB, 3.0 MiB/s, ETA {eta}, "
        f"bytes {done}/{total}"
    )


def running_instance(world: World) -> dict[str, Any]:
    reservation = world.ec2.run_instances(MinCount=1, MaxCount=1, ImageId=world.base_image_id)
    return instance_result(reservation["Instances"][0]["InstanceId"])


def invocation(status: str, stdout: str = "", stderr: str = "") -> None:
    respond(
        aws.ssm(),
        "GetCommandInvocation",
        lambda params: {
            "CommandId": params["CommandId"],
            "InstanceId": params["InstanceId"],
            "PluginName": PLUGIN,
            "Status": status,
            "StatusDetails": status,
            "StandardOutputContent": stdout,
            "StandardErrorContent": stderr,
        },
    )


def stream(instance: dict[str, Any]) -> str:
    return f"{COMMAND['commandId']}/{instance['instanceId']}/{PLUGIN}/stderr"


def write_log(instance: dict[str, Any], messages: list[str], first_ms: int = T0) -> None:
    """Events as the agent sends them (several lines each); creates the group and stream."""
    client = aws.logs()
    if not client.describe_log_groups(logGroupNamePrefix=GROUP)["logGroups"]:
        client.create_log_group(logGroupName=GROUP)
    name = stream(instance)
    if not client.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=name)["logStreams"]:
        client.create_log_stream(logGroupName=GROUP, logStreamName=name)
    client.put_log_events(
        logGroupName=GROUP,
        logStreamName=name,
        logEvents=[
            {"timestamp": first_ms + i * 1000, "message": m} for i, m in enumerate(messages)
        ],
    )


def check(world: World, instance: dict[str, Any], compaction: Any = None) -> dict[str, Any]:
    event = {"instance": instance, "command": COMMAND, "compaction": compaction}
    return check_compaction.handler(event, world.context)


def test_a_progress_line_parses_exactly() -> None:
    parsed = progress.parse_line(line("copy", "45.2", 4520, 10_000, "1:05"), "at")
    assert parsed == {
        "phase": "copy",
        "percent": 45.2,
        "bytesDone": 4520,
        "bytesTotal": 10_000,
        "etaSeconds": 65,
        "at": "at",
    }
    trim = progress.parse_line(line("partition 3: writing", "100.0", 7, 7), "at")
    assert trim is not None and trim["phase"] == "partition 3: writing"


@pytest.mark.parametrize(
    "text",
    [
        "sparsecopy: copy: 102.8% 478.0 MiB of 464.7 MiB, 3.0 MiB/s, ETA 0:00",  # old format
        line("copy", "102.8", 501_219_328, 487_272_857),  # never report more than the total
        line("copy", "50.0", 11, 10),
        "sparsecopy: partition 3: ext4, method allocated, 691.2 MiB to read",
        '{"volumes": []}',
    ],
)
def test_other_lines_are_not_progress(text: str) -> None:
    assert progress.parse_line(text, "at") is None


def test_running_command_reports_the_newest_line_of_the_stream(world: World) -> None:
    instance = running_instance(world)
    write_log(
        instance,
        [
            "sparsecopy: partition 1: vfat, method allocated, 3.0 MiB to read",
            "\n".join(line("copy", p, int(float(p) * 10), 1000) for p in ("10.0", "20.0")),
            line("copy", "30.5", 305, 1000) + "\n" + "sparsecopy: a later note",
        ],
    )
    invocation("InProgress")  # as AWS: no output content while the command runs
    calls = capture(aws.logs(), "GetLogEvents")
    result = check(world, instance)
    assert result["done"] is False
    assert result["progress"] == {
        "phase": "copy",
        "percent": 30.5,
        "bytesDone": 305,
        "bytesTotal": 1000,
        "etaSeconds": 7,
        "at": "2026-11-18T11:06:42.000Z",
    }
    (call,) = calls
    assert call == {
        "logGroupName": GROUP,
        "logStreamName": stream(instance),
        "startFromHead": False,
        "limit": progress.TAIL_EVENTS,
    }


def test_finished_command_takes_progress_from_the_log_not_the_cut_output(world: World) -> None:
    """StandardErrorContent holds only the first characters: its lines are the oldest."""
    instance = running_instance(world)
    early = "\n".join(line("copy", f"{p / 10:.1f}", p, 1000) for p in range(0, 200)) + "\n"
    assert len(early) > 8000
    write_log(
        instance, [early.strip(), line("copy", "100.0", 100, 100), line("verify", "100.0", 9, 9)]
    )
    line_out = json.dumps({"volumes": [summary_volume("vol-0123456789abcdef0")]})
    invocation("Success", stdout=line_out + "\n", stderr=early[:8000])
    result = check(world, instance)
    assert result["done"] is True
    assert result["progress"]["phase"] == "verify"
    assert result["progress"]["percent"] == 100.0


def test_no_stream_yet_keeps_null_then_the_previous_progress(world: World) -> None:
    instance = running_instance(world)
    invocation("InProgress")
    first = check(world, instance)
    assert first["progress"] is None  # the agent creates the stream with the first output
    write_log(instance, [line("copy", "12.0", 12, 100)])
    second = check(world, instance, first)
    assert second["progress"]["percent"] == 12.0
    write_log(instance, ["sparsecopy: verify: e2fsck on target partition 3 (ext4)"], T0 + 60_000)
    third = check(world, instance, second)
    assert third["progress"] == second["progress"]  # the tail holds no progress line: kept


@pytest.mark.parametrize(
    "code", ["AccessDeniedException", "ThrottlingException", "ServiceUnavailableException"]
)
def test_a_log_read_failure_keeps_the_previous_progress(world: World, code: str) -> None:
    instance = running_instance(world)
    invocation("InProgress")
    previous = {"done": False, "status": "InProgress", "summary": None, "progress": None}
    previous["progress"] = progress.parse_line(
        line("copy", "40.0", 40, 100), "2026-01-01T00:00:00Z"
    )
    respond(aws.logs(), "GetLogEvents", lambda _: error_response(code))
    result = check(world, instance, previous)
    assert result == {**previous, "progress": previous["progress"]}


def test_a_throttled_poll_carries_the_progress_forward(world: World) -> None:
    instance = running_instance(world)
    previous_progress = progress.parse_line(line("copy", "40.0", 40, 100), "2026-01-01T00:00:00Z")
    respond(aws.ssm(), "GetCommandInvocation", lambda _: error_response("ThrottlingException"))
    previous = {
        "done": False,
        "status": "InProgress",
        "summary": None,
        "progress": previous_progress,
    }
    result = check(world, instance, previous)
    assert result["transientError"].startswith("GetCommandInvocation: ThrottlingException")
    assert result["progress"] == previous_progress
