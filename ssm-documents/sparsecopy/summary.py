"""The Command document's whole standard output (``job``): one JSON line of bounded size.

GetCommandInvocation returns only the first 24,000 characters of StandardOutputContent (also for a
finished command), so the line the Lambdas parse must fit whatever the number of volumes and
partitions. Each volume's entry keeps the fields the Lambdas and the report read
(``source_bytes_read``, ``target_bytes_written``, ``blocks_written``, ``zero_blocks``,
``held_blocks``, ``held_blocks_read``; with
``--target snapshot`` also ``targetSnapshotId`` and ``blocks_put``, ``targetVolumeId`` null), the
other totals, counts (partitions, methods, fsck results) and as many partition notes, each
clipped, as fit the volume's budget. The full
summaries, every partition with its note and fsck result, go to standard error (the command log
group).

The bound: at most ``MAX_VOLUMES`` entries of at most ``VOLUME_BUDGET`` characters each, so the
success line has at most ``LINE_BOUND`` characters; an error line at most ``ERROR_LINE_BOUND``.
JSON is written with ``ensure_ascii``, so characters and bytes are the same count.
"""

import json
import math
from collections.abc import Sequence
from typing import Optional

from .shared import MAX_VOLUMES_PER_JOB, SSM_STANDARD_OUTPUT_CHARACTERS

STDOUT_LIMIT = SSM_STANDARD_OUTPUT_CHARACTERS  # what GetCommandInvocation returns of stdout
MAX_VOLUMES = MAX_VOLUMES_PER_JOB  # (the document's parameter patterns allow as many)
VOLUME_BUDGET = 2_000  # characters of one volume's entry
NOTE_BUDGET = 240  # characters of one note in the entry (JSON-escaped)
ERROR_BUDGET = 1_000  # characters of the error text in an error line (JSON-escaped)
ID_BUDGET = 32  # a volume id: vol- and up to 17 hex digits
ELLIPSIS = "..."
KNOWN_METHODS = ("allocated", "trim", "raw", "header")
# a partition's "fsck" (verify.py) by its head: the checker found nothing on the target, or
# only what it finds on the source too; anything else is a reason no checker ran
FSCK_OUTCOMES = {"clean": "clean", "as the source": "as_source"}
_ENVELOPE = ("{", '"volumes":[', "]", "}")
LINE_BOUND = sum(map(len, _ENVELOPE)) + MAX_VOLUMES * VOLUME_BUDGET + (MAX_VOLUMES - 1)
ERROR_LINE_BOUND = len('{"error":"","sourceVolumeId":""}') + ERROR_BUDGET + ID_BUDGET
MAX_COUNT = 2**63  # byte counts beyond this are not real and would only lengthen the line

Json = dict[str, object]


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _encoded_len(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=True)) - 2


def clip(text: str, budget: int) -> str:
    """``text``, cut so that its JSON-escaped form has at most ``budget`` characters."""
    if _encoded_len(text) <= budget:
        return text
    room, used, kept = budget - len(ELLIPSIS), 0, []
    for char in text:
        used += _encoded_len(char)
        if used > room:
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS


def _count(value: object) -> Optional[int]:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT:
        return value
    return None


def _seconds(value: object) -> Optional[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and 0 <= number < 1e9:
            return round(number, 3)
    return None


def _partitions(summary: Json) -> list[Json]:
    parts = summary.get("partitions")
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _note(part: Json) -> str:
    number = _count(part.get("number"))
    fs, method = part.get("fs"), part.get("method")
    head = "partition {} ({}, {})".format(
        number if number is not None else "?",
        clip(fs, 16) if isinstance(fs, str) else "?",
        clip(method, 16) if isinstance(method, str) else "?",
    )
    return clip(f"{head}: {part.get('note')}", NOTE_BUDGET)


def _id(value: object) -> Optional[str]:
    return clip(value, ID_BUDGET) if isinstance(value, str) and value else None


def volume_entry(source_volume_id: str, target_volume_id: Optional[str], summary: Json) -> Json:
    """One volume's entry of the standard output line: at most VOLUME_BUDGET characters. A copy
    into a snapshot has no target volume (None) and its summary names the snapshot."""
    parts = _partitions(summary)
    methods: dict[str, int] = {}
    fsck: dict[str, int] = {}
    for part in parts:
        method = part.get("method")
        key = method if method in KNOWN_METHODS else "other"
        methods[str(key)] = methods.get(str(key), 0) + 1
        result = part.get("fsck")
        if isinstance(result, str) and result:
            outcome = FSCK_OUTCOMES.get(result.split(":")[0], "not_checked")
            fsck[outcome] = fsck.get(outcome, 0) + 1
    table = summary.get("table")
    noted = [p for p in parts if isinstance(p.get("note"), str) and p.get("note")]
    consistent = summary.get("sourceConsistent")
    entry: Json = {
        "sourceVolumeId": clip(source_volume_id, ID_BUDGET),
        # False: a filesystem's own checker found the source inconsistent (copied raw, the
        # notes say what it found); None: no checker ran
        "sourceConsistent": consistent if isinstance(consistent, bool) else None,
        "targetVolumeId": _id(target_volume_id),
        "targetSnapshotId": _id(summary.get("targetSnapshotId")),
        "source_bytes_read": _count(summary.get("source_bytes_read")),
        "target_bytes_written": _count(summary.get("target_bytes_written")),
        "blocks_put": _count(summary.get("blocks_put")),  # snapshot target: blocks put
        # the 512 KiB blocks written or put (held ∩ needed), and how many held only zeros
        "blocks_written": _count(summary.get("blocks_written")),
        "zero_blocks": _count(summary.get("zero_blocks")),
        "outside_partitions_bytes": _count(summary.get("outside_partitions_bytes")),
        # --source-blocks: blocks the snapshot holds, and how many of them the copy read
        "held_blocks": _count(summary.get("held_blocks")),
        "held_blocks_read": _count(summary.get("held_blocks_read")),
        "verified": summary.get("verified") is True,
        "seconds": _seconds(summary.get("seconds")),
        "table": clip(table, 8) if isinstance(table, str) else None,
        "partition_count": len(parts),
        "methods": {name: methods[name] for name in sorted(methods)},
        "fsck": {name: fsck[name] for name in sorted(fsck)},
        "note_count": len(noted),
        "notes": [],
    }
    # Everything above is bounded by construction (tested with the largest values); the notes take
    # what is left of the budget, in partition order, and note_count says how many there were.
    size = len(dumps(entry))
    if size > VOLUME_BUDGET:
        raise ValueError(f"volume entry without notes is {size} > {VOLUME_BUDGET} characters")
    notes: list[str] = []
    for part in noted:
        note = _note(part)
        grown = size + len(dumps(note)) + (1 if notes else 0)
        if grown > VOLUME_BUDGET:
            break
        notes.append(note)
        size = grown
    entry["notes"] = notes
    return entry


def printable(text: str) -> str:
    """``text`` as printable ASCII: non-ASCII as Python escapes (\\xe9), controls as ``?``."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    return "".join(c if " " <= c <= "~" else "?" for c in escaped)


def error_line(error: str, source_volume_id: str) -> str:
    """The failure line: at most ERROR_LINE_BOUND characters, the error made printable ASCII."""
    return dumps(
        {
            "error": clip(printable(error), ERROR_BUDGET),
            "sourceVolumeId": clip(source_volume_id, ID_BUDGET),
        }
    )


def details(index: int, count: int, source: str, target: Optional[str], summary: Json) -> list[str]:
    """The full summary of one volume for standard error: its totals, then one line a partition."""
    totals = {k: v for k, v in summary.items() if k != "partitions"}
    into = target or summary.get("targetSnapshotId")
    head = f"summary of volume {index + 1}/{count} {source} -> {into}"
    lines = [f"{head}: {json.dumps(totals)}"]
    for part in _partitions(summary):
        lines.append(f"{head} partition {part.get('number')}: {json.dumps(part)}")
    return lines


def join(
    sources: Sequence[str], targets: Sequence[Optional[str]], summaries: Sequence[Json]
) -> tuple[str, list[str]]:
    """(the standard output line, the standard error lines) for the copies' summaries, one a
    volume in job order (the job checks that there are 1 to MAX_VOLUMES of each); a target is
    None for a copy into a snapshot."""
    if not (len(sources) == len(targets) == len(summaries)) or len(sources) > MAX_VOLUMES:
        raise ValueError(
            f"join got {len(sources)} source volume ids, {len(targets)} target volume ids and "
            f"{len(summaries)} summaries: they must match, at most {MAX_VOLUMES}"
        )
    entries: list[str] = []
    stderr: list[str] = []
    for index, (source, target, summary) in enumerate(zip(sources, targets, summaries)):
        stderr.extend(details(index, len(sources), source, target, summary))
        entries.append(dumps(volume_entry(source, target, summary)))
    result = '{"volumes":[' + ",".join(entries) + "]}"
    if len(result) > LINE_BOUND or LINE_BOUND >= STDOUT_LIMIT:
        raise ValueError(f"summary line of {len(result)} characters exceeds {LINE_BOUND}")
    return result, stderr
