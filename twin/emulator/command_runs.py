"""A Run Command invocation on one instance: what ran, its state and output as
GetCommandInvocation reports them, and stopping it when the instance goes away."""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STDOUT_LIMIT = 24_000  # StandardOutputContent is cut here by SSM
STDERR_LIMIT = 8_000


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class CommandRun:
    command_id: str
    instance_id: str
    document_name: str
    script: str
    timeout_seconds: int
    rundir: Path
    status: str = "Pending"
    response_code: int = -1
    stdout: str = ""
    stderr: str = ""
    started: datetime.datetime | None = None
    ended: datetime.datetime | None = None
    polls: int = 0
    process: subprocess.Popen[str] | None = None
    devices: list[str] = field(default_factory=list)
    # the user's root filesystem, mounted as the instance's / (it booted from the user's disk)
    root_mount: tuple[str, Path] | None = None
    instance_gone: bool = False
    thread: threading.Thread | None = None

    def invocation(self) -> dict[str, Any]:
        elapsed = ""
        if self.started is not None:
            end = self.ended or now()
            elapsed = f"PT{(end - self.started).total_seconds():.3f}S"
        return {
            "CommandId": self.command_id,
            "InstanceId": self.instance_id,
            "Comment": "",
            "DocumentName": self.document_name,
            "DocumentVersion": "$DEFAULT",
            "PluginName": "aws:runShellScript",
            "ResponseCode": self.response_code,
            "ExecutionStartDateTime": self.started.isoformat() if self.started else "",
            "ExecutionElapsedTime": elapsed,
            "ExecutionEndDateTime": self.ended.isoformat() if self.ended else "",
            "Status": self.status,
            "StatusDetails": self.status,
            "StandardOutputContent": self.stdout[:STDOUT_LIMIT],
            "StandardOutputUrl": "",
            "StandardErrorContent": self.stderr[:STDERR_LIMIT],
            "StandardErrorUrl": "",
            "CloudWatchOutputConfig": {
                "CloudWatchLogGroupName": "",
                "CloudWatchOutputEnabled": False,
            },
        }


def kill(run: CommandRun) -> None:
    """Kill the run's whole process group (a lost instance takes everything on it down)."""
    if run.process is not None and run.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGKILL)


def stop(run: CommandRun) -> None:
    """Kill the run and wait (up to 30 s) for its thread to free its devices."""
    kill(run)
    if run.thread is not None and run.thread is not threading.current_thread():
        run.thread.join(timeout=30)
