"""A Run Command invocation on one instance: what ran, its state and output as
GetCommandInvocation reports them (nothing until it ends, then only the first characters; the
whole output goes to CloudWatch Logs, command_logs.py), and stopping it when the instance goes
away."""

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

from .command_logs import CommandLogs

STDOUT_LIMIT = 24_000  # StandardOutputContent is cut here by SSM
STDERR_LIMIT = 8_000  # StandardErrorContent: "the first 8,000 characters" (botocore's docs)
FINAL_STATUSES = frozenset({"Success", "Failed", "TimedOut", "Cancelled"})


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
    logs: CommandLogs | None = None  # SendCommand's CloudWatchOutputConfig
    # A 2.2 document's step name: PluginName of the invocation and part of its log stream names
    plugin_name: str = "aws:runShellScript"
    log_shipper: threading.Thread | None = None
    # the document's Target parameter (diskless: which recorded run's plan replays)
    target: str = "volume"

    def invocation(self) -> dict[str, Any]:
        elapsed = ""
        if self.started is not None:
            end = self.ended or now()
            elapsed = f"PT{(end - self.started).total_seconds():.3f}S"
        finished = self.status in FINAL_STATUSES
        return {
            "CommandId": self.command_id,
            "InstanceId": self.instance_id,
            "Comment": "",
            "DocumentName": self.document_name,
            "DocumentVersion": "$DEFAULT",
            "PluginName": self.plugin_name,
            "ResponseCode": self.response_code,
            "ExecutionStartDateTime": self.started.isoformat() if self.started else "",
            "ExecutionElapsedTime": elapsed,
            "ExecutionEndDateTime": self.ended.isoformat() if self.ended else "",
            "Status": self.status,
            "StatusDetails": self.status,
            # "If the command hasn't finished running ... this string is empty."
            "StandardOutputContent": self.stdout[:STDOUT_LIMIT] if finished else "",
            "StandardOutputUrl": "",
            "StandardErrorContent": self.stderr[:STDERR_LIMIT] if finished else "",
            "StandardErrorUrl": "",
            "CloudWatchOutputConfig": {
                "CloudWatchLogGroupName": self.logs.group if self.logs else "",
                "CloudWatchOutputEnabled": self.logs is not None,
            },
        }


def kill(run: CommandRun) -> None:
    """Kill the run's whole process group (a lost instance takes everything on it down)."""
    if run.process is not None and run.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGKILL)


# A bound on a hung run, not an estimate: with 30 s, a run's mount outlived terminate_instances
# in a suite at a load of 15-25 on 2 cores (test_boot_twin: the user root is unmounted...)
STOP_SECONDS = 120


def stop(run: CommandRun) -> None:
    """Kill the run and wait (up to STOP_SECONDS) for its thread to free its devices."""
    kill(run)
    if run.thread is not None and run.thread is not threading.current_thread():
        run.thread.join(timeout=STOP_SECONDS)
