"""The twin's Run Command output as AWS gives it (issue #10): GetCommandInvocation shows no output
while the command runs and then only the first 24,000 (stdout) / 8,000 (stderr) characters; with
CloudWatchOutputConfig the SSM agent streams all of it, in batches, to
`<CommandId>/<InstanceId>/<step name>/stdout|stderr` in the group SendCommand named."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from twin_helpers import shell_document

from twin.emulator import command_logs
from twin.emulator.server import Emulator

GROUP = "/twin-test/commands"
LINES = 400  # stderr lines of ~30 characters: ~12,000, more than the 8,000 kept
LOOP = f'for i in $(seq -w 1 {LINES}); do echo "copy: line $i of {LINES}" >&2; done'
DOCUMENT = shell_document(
    "test document: a slow start, then many stderr lines and a summary line",
    {},
    [
        "echo 'first line' >&2",
        "sleep 2.5",  # longer than a batch: the first line is in the log while it runs
        LOOP,
        "echo '{\"volumes\": []}'",
    ],
)


def _instance(emulator: Emulator) -> str:
    ec2 = emulator.boto3_client("ec2")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    reservation = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)
    return str(reservation["Instances"][0]["InstanceId"])


def _events(logs: Any, stream: str) -> list[dict[str, Any]]:
    found = logs.describe_log_streams(logGroupName=GROUP, logStreamNamePrefix=stream)
    if not found["logStreams"]:
        return []
    answer = logs.get_log_events(logGroupName=GROUP, logStreamName=stream, startFromHead=True)
    return list(answer["events"])


def test_output_streams_to_cloudwatch_logs_while_the_invocation_shows_none(
    emulator: Emulator,
) -> None:
    ssm, logs = emulator.boto3_client("ssm"), emulator.boto3_client("logs")
    ssm.create_document(
        Content=json.dumps(DOCUMENT), Name="twin-logs-doc", DocumentType="Command",
        DocumentFormat="JSON",
    )  # fmt: skip
    instance_id = _instance(emulator)
    command_id = ssm.send_command(
        DocumentName="twin-logs-doc",
        InstanceIds=[instance_id],
        CloudWatchOutputConfig={"CloudWatchOutputEnabled": True, "CloudWatchLogGroupName": GROUP},
    )["Command"]["CommandId"]
    stderr = f"{command_id}/{instance_id}/run/stderr"  # the document's step is named "run"
    time.sleep(command_logs.BATCH_SECONDS + 0.8)
    with pytest.raises(ClientError, match="InvocationDoesNotExist"):  # SSM needs a moment
        ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
    running = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
    assert running["Status"] == "InProgress"
    assert (running["StandardOutputContent"], running["StandardErrorContent"]) == ("", "")
    assert running["PluginName"] == "run"
    assert [e["message"] for e in _events(logs, stderr)] == ["first line"]
    for _ in range(200):
        done = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        if done["Status"] not in ("Pending", "InProgress"):
            break
        time.sleep(0.1)
    assert done["Status"] == "Success"
    assert done["CloudWatchOutputConfig"] == {
        "CloudWatchLogGroupName": GROUP,
        "CloudWatchOutputEnabled": True,
    }
    assert len(done["StandardErrorContent"]) == 8000  # the first characters only
    logged = "\n".join(e["message"] for e in _events(logs, stderr)).splitlines()
    assert len(logged) == LINES + 1 and logged[-1] == f"copy: line {LINES} of {LINES}"
    stdout = _events(logs, f"{command_id}/{instance_id}/run/stdout")
    assert [e["message"] for e in stdout] == ['{"volumes": []}']
