"""Run Command output in CloudWatch Logs, as the SSM agent sends it with CloudWatchOutputConfig.

The agent streams what the plugin writes while it runs (GetCommandInvocation shows nothing until
the command ends, and then only the first 24,000/8,000 characters): one stream per plugin and
output, named ``<CommandId>/<InstanceId>/<step name>/stdout`` and ``.../stderr`` (a 2.2
document's step name; ``aws:runShellScript`` of a 1.2 document becomes ``aws-runShellScript``),
created on the first output, in the log group SendCommand named (created if missing). It
uploads in batches, so the newest lines reach the stream a moment after they were written: here
every BATCH_SECONDS, one event per batch holding the complete lines written since the last one
(an event may hold many lines; a line is never split across events)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any

from moto.logs.models import logs_backends

BATCH_SECONDS = 1.0


@dataclass
class CommandLogs:
    """Where one invocation's output goes and what of it was not uploaded yet."""

    account_id: str
    region: str
    group: str
    prefix: str  # <CommandId>/<InstanceId>/<step name>
    pending: dict[str, str] = field(default_factory=dict)  # "stdout"/"stderr" -> text
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    shipped_events: int = 0

    def add(self, output: str, text: str) -> None:
        with self.lock:
            self.pending[output] = self.pending.get(output, "") + text

    def _take(self, final: bool) -> dict[str, str]:
        """The complete lines of each output (everything left when ``final``)."""
        taken: dict[str, str] = {}
        with self.lock:
            for output, text in self.pending.items():
                cut = len(text) if final else text.rfind("\n") + 1
                if cut > 0:
                    taken[output], self.pending[output] = text[:cut], text[cut:]
        return taken

    def ship(self, final: bool = False) -> None:
        taken = self._take(final)
        if not taken:
            return
        backend = logs_backends[self.account_id][self.region]
        backend.ensure_log_group(self.group)
        stamp = int(time.time() * 1000)
        for output, text in taken.items():
            stream = f"{self.prefix}/{output}"
            backend.ensure_log_stream(self.group, stream)
            message = text[:-1] if text.endswith("\n") else text
            backend.put_log_events(self.group, stream, [{"timestamp": stamp, "message": message}])
            self.shipped_events += 1


def step_stream_name(step: str) -> str:
    """The stream's plugin part: the step's name, a plugin's colon as a dash."""
    return step.replace(":", "-")


def pump(pipe: IO[str], output: str, keep: list[str], logs: CommandLogs | None) -> None:
    """Read one output of the plugin line by line: kept whole for the invocation, and queued
    for the log stream."""
    for line in iter(pipe.readline, ""):
        keep.append(line)
        if logs is not None:
            logs.add(output, line)
    pipe.close()


def shipper(logs: CommandLogs) -> threading.Thread:
    """Upload every BATCH_SECONDS until ``logs.stop``; then the rest, once."""

    def loop() -> None:
        while not logs.stop.wait(BATCH_SECONDS):
            logs.ship()
        logs.ship(final=True)

    thread = threading.Thread(target=loop, daemon=True, name=f"logs {logs.prefix}")
    thread.start()
    return thread


def from_request(
    config: Any, account_id: str, region: str, prefix: str, document: str
) -> CommandLogs | None:
    """SendCommand's CloudWatchOutputConfig: None unless CloudWatchOutputEnabled; without a
    group name the agent writes to /aws/ssm/<document name>."""
    if not isinstance(config, dict) or not config.get("CloudWatchOutputEnabled"):
        return None
    group = config.get("CloudWatchLogGroupName") or f"/aws/ssm/{document}"
    return CommandLogs(account_id, region, group, prefix)
