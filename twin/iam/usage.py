"""Which statement of which role the twin's runs used, and the proof that every one is used.

check.py's check_calls(..., usage_from=RUN) hands each run's judgement here: every statement of
every role a caller of the stack has (the functions' roles and the transfer instance's role),
and which of them allowed a recorded call. With TWIN_IAM_USAGE=DIR set (make test-twin sets it),
each process appends one JSON line per run to DIR/<pid>.jsonl, so pytest-xdist's workers never
share a file. After the suite, `python -m twin.iam.usage DIR --report FILE` merges the parts,
writes the report (per role: each statement, its calls and the runs that used it; every denial)
and exits 1 naming each role's unused statement and each denial.

Not every statement can be used by a call the code makes; NOT_CALLED says why, per statement id,
and the report lists those apart (the merge fails on an entry that no role has any more, so the
list cannot go stale). Only the roles of the stack's own functions (handler compactor.handlers.*)
and the transfer instance's are proven: CDK's deploy-time providers never run in the twin. Deny
statements are guards: that no call matched them is their purpose.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

USAGE_DIR_ENV = "TWIN_IAM_USAGE"

# Statements that no call of the code makes, or that only a path the twin does not model uses,
# with the reason; the template tests check each statically. By Sid (in every role), or by
# "<role's construct path, as its logical id without the hash>:<Sid>" (in that role only).
NOT_CALLED: dict[str, str] = {
    "TaskRolesResolveBatch:Describe": (
        "only a batch with a selector describes (paginated DescribeSnapshots/DescribeImages of the "
        "account); the twin's batches list their items (test/lambdas runs the selector on moto)"
    ),
    "TaskRolesSummarizeBatch:FindABatchsResultFiles": (
        "S3 weighs s3:ListBucket when a GetObject names a missing key (404 to a caller that may "
        "list, else 403); the twin's S3 reads the grant from the role's statements for that "
        "answer (test_batch_manifest_access.py) and records no authorization for it"
    ),
    "OperationsSweepRole:PublishSweptEvents": (
        "the twin runs sweeper.sweep as the schedule would, not its handler, which publishes the "
        "sweep event (test/lambdas/test_sweep.py checks the handler)"
    ),
    "TaskRolesStartCompaction:CheckKeysBeforeLaunching": (
        "start_compaction describes a target key only when the plan names it by id, as plans of "
        "versions before targetKmsKeyId did (prepare now resolves every key to its ARN): an "
        "execution that spans an update"
    ),
    "ResolveTheAmiParameterOfTheLaunchTemplate": (
        "EC2 resolves the launch template's resolve:ssm: image with the caller's permissions; "
        "the checker cannot simulate it (the public parameter's ARN has no account)"
    ),
    "CreateTheSpotServiceLinkedRole": (
        "only an account's first Spot launch creates EC2's Spot service-linked role; the twin's "
        "account has it, as every account that ever launched Spot does"
    ),
    "UseKeysOnlyThroughEc2": (
        "EC2 calls KMS with the caller's permissions (kms:ViaService ec2) for encrypted volumes; "
        "the twin does not model the KMS calls EC2 makes"
    ),
    "StartEncryptedDirectSnapshotsThroughEbs": (
        "EBS calls KMS with the caller's permissions (kms:ViaService ebs) for an encrypted direct "
        "snapshot; the twin does not model the KMS calls EBS makes"
    ),
    "ReadEncryptedSnapshotsThroughEbs": (
        "EBS calls KMS with the caller's permissions to list an encrypted snapshot's blocks; the "
        "twin does not model the KMS calls EBS makes"
    ),
    "WriteEncryptedDirectSnapshotsThroughEbs": (
        "EBS calls KMS with the instance role's permissions for the blocks of an encrypted direct "
        "snapshot; the twin does not model the KMS calls EBS makes"
    ),
    "WriteOwnLogs": "the Lambda service writes the function's logs with its role",
    "WriteTheCommandsOutput": "the SSM agent writes the Command's output; the twin's does not",
    "FindTheCommandLogGroup": "the SSM agent looks for the log group; the twin's agent does not",
}
# Whole policies a service uses, by construct id (the policy's logical id without its hash)
SERVICE_POLICIES = {
    "TransferInstanceRoleSsmAgentPolicy": (
        "the SSM agent's own calls (AmazonSSMManagedInstanceCore, lib/ssm-agent-policy.ts); the "
        "twin's agent makes none"
    ),
}
# CDK's statements without a Sid that a service, not the code, uses: active tracing (the Lambda
# service sends the traces) and an on-failure destination (the Lambda service sends to the queue)
SERVICE_ACTIONS = {
    "xray:PutTraceSegments": "the Lambda service sends the traces (active tracing)",
    "xray:PutTelemetryRecords": "the Lambda service sends the traces (active tracing)",
    "sqs:SendMessage": "the Lambda service sends a failed invocation to its on-failure destination",
    "sqs:GetQueueAttributes": "the Lambda service sends a failed invocation to its destination",
    "sqs:GetQueueUrl": "the Lambda service sends a failed invocation to its destination",
}


def statement_id(policy: str, statement: dict[str, Any], index: int) -> str:
    """<policy name>/<Sid>, or <policy name>/#<index> for a statement without one (check.mjs
    names a matched statement the same way)."""
    sid = statement.get("Sid")
    return f"{policy}/{sid if sid else f'#{index}'}"


def statements(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A role's statements (check.py's policy entries; AWS managed policies are not the stack's
    and are left out): id -> {effect, actions}."""
    out: dict[str, dict[str, Any]] = {}
    for entry in entries:
        document = entry.get("policy")
        if document is None:
            continue
        listed = document.get("Statement", [])
        for index, statement in enumerate(listed if isinstance(listed, list) else [listed]):
            actions = statement.get("Action", [])
            out[statement_id(entry["name"], statement, index)] = {
                "effect": statement.get("Effect", "Allow"),
                "actions": actions if isinstance(actions, list) else [actions],
            }
    return out


def part(
    run: str,
    roles: dict[str, list[dict[str, Any]]],
    used: dict[str, dict[str, int]],
    denials: Iterable[str],
) -> dict[str, Any]:
    """One run's line: role -> {statements, used: id -> calls}, and its denials."""
    return {
        "run": run,
        "roles": {
            role: {"statements": statements(entries), "used": used.get(role, {})}
            for role, entries in roles.items()
        },
        "denials": list(denials),
    }


def record(line: dict[str, Any]) -> None:
    """Appends a run's line to TWIN_IAM_USAGE/<pid>.jsonl (nothing without TWIN_IAM_USAGE)."""
    directory = os.environ.get(USAGE_DIR_ENV)
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    with (Path(directory) / f"{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


def merge(lines: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The report of many runs: per role, each statement with its calls and the runs that used
    it; the unused Allow statements; every denial with its run."""
    roles: dict[str, dict[str, Any]] = {}
    denials: list[str] = []
    runs = 0
    for line in lines:
        runs += 1
        denials += [f"{line['run']}: {denial}" for denial in line["denials"]]
        for role, seen in line["roles"].items():
            into = roles.setdefault(role, {"statements": {}})
            for sid, statement in seen["statements"].items():
                row = into["statements"].setdefault(sid, {**statement, "calls": 0, "runs": []})
                calls = seen["used"].get(sid, 0)
                row["calls"] += calls
                if calls and line["run"] not in row["runs"]:
                    row["runs"].append(line["run"])
    unused: list[str] = []
    not_called: list[str] = []
    for role, seen in sorted(roles.items()):
        for sid, row in sorted(seen["statements"].items()):
            if row["calls"] or row["effect"] != "Allow":
                continue
            reason = not_called_reason(role, sid, row["actions"])
            if reason:
                row["notCalled"] = reason
                not_called.append(f"{role}: {sid}")
            else:
                unused.append(f"{role}: statement {sid} ({', '.join(row['actions'])})")
    names = {
        name
        for role, seen in roles.items()
        for statement in seen["statements"]
        for name in (statement.split("/", 1)[1], f"{role[:-8]}:{statement.split('/', 1)[1]}")
    }
    stale = sorted(set(NOT_CALLED) - names) if roles else []
    return {
        "runs": runs,
        "roles": roles,
        "denied": denials,
        "unused": unused,
        "notCalled": not_called,
        "staleNotCalled": stale,
    }


def not_called_reason(role: str, statement: str, actions: list[str]) -> str | None:
    """Why no call of the code uses this statement of this role (NOT_CALLED, SERVICE_POLICIES,
    SERVICE_ACTIONS), else None."""
    policy, sid = statement.split("/", 1)
    if policy[:-8] in SERVICE_POLICIES:
        return SERVICE_POLICIES[policy[:-8]]
    for key in (f"{role[:-8]}:{sid}", sid):
        if key in NOT_CALLED:
            return NOT_CALLED[key]
    if actions and all(action in SERVICE_ACTIONS for action in actions):
        return "; ".join(sorted({SERVICE_ACTIONS[action] for action in actions}))
    return None


def read_parts(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(text)
        for path in sorted(directory.glob("*.jsonl"))
        for text in path.read_text().splitlines()
        if text.strip()
    ]


def failures(report: dict[str, Any]) -> list[str]:
    """What makes the proof fail: no run at all, a denial, an unused statement, a stale entry
    of NOT_CALLED."""
    if not report["runs"]:
        return ["no twin run recorded its IAM usage: was TWIN_IAM_USAGE set for the suite?"]
    return (
        [f"denied: {d}" for d in report["denied"]]
        + [f"unused: {u}" for u in report["unused"]]
        + [f"NOT_CALLED names {s}, which no role has: remove it" for s in report["staleNotCalled"]]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", type=Path, help="the TWIN_IAM_USAGE directory of the suite")
    parser.add_argument("--report", type=Path, required=True, help="where to write the report")
    args = parser.parse_args(argv)
    report = merge(read_parts(args.parts))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    problems = failures(report)
    statements_total = sum(len(r["statements"]) for r in report["roles"].values())
    print(
        f"twin IAM: {report['runs']} runs, {len(report['roles'])} roles, {statements_total} "
        f"statements; {len(report['denied'])} denied, {len(report['unused'])} unused, "
        f"{len(report['notCalled'])} not called by code (report: {args.report})"
    )
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
