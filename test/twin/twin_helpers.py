"""What several twin test files build: a Command document with one shell step, a sparse
volume image with data only where the test wrote it, and a run of the ASL runner on a
hand-written definition (no emulator)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from twin.emulator.blockstore import EBS_BLOCK

GIB = 1024**3
REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "twin" / "runner" / "run.mjs"
# "HELLO twin" in block 0 and two whole blocks of "z" at 100-101: the image most tests copy.
BASE_WRITES = [(0, b"HELLO twin"), (100 * EBS_BLOCK, b"z" * EBS_BLOCK * 2)]


def shell_document(
    description: str, parameters: dict[str, Any], commands: list[str]
) -> dict[str, Any]:
    """A Command document whose one aws:runShellScript step runs `commands` (60 s timeout)."""
    return {
        "schemaVersion": "2.2",
        "description": description,
        "parameters": parameters,
        "mainSteps": [
            {
                "action": "aws:runShellScript",
                "name": "run",
                "inputs": {"timeoutSeconds": "60", "runCommand": commands},
            }
        ],
    }


def holey_image(path: Path, writes: list[tuple[int, bytes]] = BASE_WRITES) -> Path:
    """A 1 GiB sparse file holding `writes` (offset, bytes) and holes everywhere else."""
    with open(path, "wb") as f:
        f.truncate(GIB)
        for offset, data in writes:
            f.seek(offset)
            f.write(data)
    return path


DOCUMENT = shell_document(
    "test document: reads the first bytes of the volume's device",
    {
        "SourceVolumeIds": {"type": "String", "allowedPattern": "^vol-[0-9a-f]+$"},
        "Mode": {"type": "String", "default": "ok", "allowedValues": ["ok", "fail"]},
    },
    [
        "set -eu",
        'vol="{{ SourceVolumeIds }}"',
        'link="$SPARSECOPY_BY_ID_DIR/nvme-Amazon_Elastic_Block_Store_${vol/-/}"',
        'dev=$(readlink -f "$link")',
        'echo "reading $dev" >&2',
        'if [ "{{Mode}}" = fail ]; then echo \'{"error": "told to fail"}\'; exit 3; fi',
        'head -c 16 "$dev" | od -An -c >&2',
        "sleep 0.3",
        'echo "{\\"device\\": \\"$dev\\", \\"first\\": \\"$(head -c 5 "$dev")\\"}"',
    ],
)


def create_document(ssm: Any, document: dict[str, Any] = DOCUMENT) -> None:
    ssm.create_document(
        Content=json.dumps(document),
        Name="twin-test-doc",
        DocumentType="Command",
        DocumentFormat="JSON",
    )


def send(ssm: Any, instance_id: str, **parameters: list[str]) -> str:
    """Send the document created by create_document; returns the command id."""
    return ssm.send_command(
        DocumentName="twin-test-doc", InstanceIds=[instance_id], Parameters=parameters
    )["Command"]["CommandId"]


def wait_invocation(ssm: Any, command_id: str, instance_id: str) -> dict[str, Any]:
    seen = []
    for _ in range(200):
        try:
            inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as error:
            seen.append(error.response["Error"]["Code"])
            continue
        seen.append(inv["Status"])
        if inv["Status"] not in ("Pending", "InProgress", "Delayed"):
            inv["seen"] = seen
            return inv
        time.sleep(0.05)
    raise AssertionError(f"command never finished: {seen[-5:]}")


def run_runner(
    tmp_path: Path, definition: dict[str, Any], execution_input: Any, machine_arn: str,
    wait_ms: int, **job: Any,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """twin/runner/run.mjs on `definition` alone: no functions, waits of `wait_ms`, execution e1
    of `machine_arn`; `job` adds or overrides the job's keys (run.mjs's header lists them)."""
    name = machine_arn.rsplit(":", 1)[1]
    execution = machine_arn.replace(":stateMachine:", ":execution:")
    spec = {
        "definition": definition,
        "input": execution_input,
        "context": {
            "Execution": {"Id": f"{execution}:e1", "Name": "e1"},
            "StateMachine": {"Id": machine_arn, "Name": name},
        },
        "functions": {},
        "python": "python3",
        "worker": "unused",
        "logDir": str(tmp_path / "logs"),
        "waitMs": wait_ms,
        "msPerAwsSecond": wait_ms,
        "retryMs": 10,
        **job,
    }
    (tmp_path / "job.json").write_text(json.dumps(spec))
    return subprocess.run(["node", str(RUNNER), str(tmp_path / "job.json"),
                           str(tmp_path / "result.json")], capture_output=True, text=True,
                          timeout=120, cwd=REPO)  # fmt: skip
