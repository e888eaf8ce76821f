"""The data plane's progress, as check_compaction keeps it in `$.compaction.progress`.

sparsecopy prints a progress line on standard error every few seconds (docs/data-plane.md,
"Progress"): `sparsecopy: PHASE: PCT% DONE of TOTAL, RATE/s, ETA M:SS, bytes N/M`.
GetCommandInvocation cannot show them: its StandardErrorContent is empty until the command ends
and then holds only the first 8,000 characters (StandardOutputContent: 24,000), i.e. the oldest
lines. The SSM agent streams the whole output to the command's log group (SendCommand's
CloudWatchOutputConfig) as `<CommandId>/<InstanceId>/<step name>/stderr`, in batches; the newest
events of that stream (GetLogEvents, startFromHead false) hold the latest line.

Progress never fails a poll: a stream not created yet, an unreadable log or a tail without a
progress line leaves the previous poll's progress."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from compactor import aws
from compactor.models import CompactionProgress
from compactor.observability import logger

# Newest events read per poll: the agent sends several lines per event, and the job prints its
# progress every 2 s, so the tail holds the latest line unless the program has moved on to its
# summary lines (then the previous progress is kept).
TAIL_EVENTS = 25
LINE = re.compile(
    r"^sparsecopy: (?P<phase>.+?): +(?P<percent>\d{1,3}(?:\.\d+)?)% .*"
    r", ETA (?P<minutes>\d+):(?P<seconds>\d\d), bytes (?P<done>\d+)/(?P<total>\d+)\s*$"
)


def stream_name(command_id: str, instance_id: str, plugin_name: str) -> str:
    """The agent's stderr stream of one step: a plugin name's colon becomes a dash."""
    return f"{command_id}/{instance_id}/{plugin_name.replace(':', '-')}/stderr"


def parse_line(line: str, at: str) -> CompactionProgress | None:
    """The progress of one line; None for any other line or a line that is not consistent."""
    match = LINE.match(line.strip())
    if match is None:
        return None
    done, total, percent = int(match["done"]), int(match["total"]), float(match["percent"])
    if done > total or percent > 100:
        return None
    return {
        "phase": match["phase"],
        "percent": percent,
        "bytesDone": done,
        "bytesTotal": total,
        "etaSeconds": int(match["minutes"]) * 60 + int(match["seconds"]),
        "at": at,
    }


def latest(events: Iterable[Mapping[str, Any]]) -> CompactionProgress | None:
    """The last progress line of the events (oldest first by timestamp; an event may hold
    several lines)."""
    found: CompactionProgress | None = None
    for event in sorted(events, key=lambda e: int(e.get("timestamp", 0))):
        at = _iso(int(event.get("timestamp", 0)))
        for line in str(event.get("message", "")).splitlines():
            parsed = parse_line(line, at)
            if parsed is not None:
                found = parsed
    return found


def read(
    log_group: str,
    command_id: str,
    instance_id: str,
    plugin_name: str,
    previous: CompactionProgress | None,
) -> CompactionProgress | None:
    """The newest progress in the command's stderr stream, else ``previous``."""
    stream = stream_name(command_id, instance_id, plugin_name)
    try:
        answer = aws.logs().get_log_events(
            logGroupName=log_group,
            logStreamName=stream,
            startFromHead=False,
            limit=TAIL_EVENTS,
        )
        found = latest(answer.get("events") or [])
    except ClientError as error:
        # ResourceNotFoundException: the agent creates the stream with the first output
        reason = f"{aws.error_code(error)}: {aws.error_message(error)}"
        logger.info("progress not read", extra={"stream": stream, "error": reason})
        return previous
    except (BotoCoreError, ValueError, TypeError, AttributeError) as error:
        logger.warning("progress not read", extra={"stream": stream, "error": repr(error)})
        return previous
    return found if found is not None else previous


def _iso(millis: int) -> str:
    moment = datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
