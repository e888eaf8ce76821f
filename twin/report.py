"""The report of one twin scenario (out/demo/report.json, every sweep row): the Report dataclass,
one field a key, in the order the JSON has them, each with its meaning (docs/twin.md's table is
generated from them: fields_table()); built from the run and its checks, then written with the
block picture."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, fields
from typing import Any

from devkit.markdown import table

from .cfn import Deployment
from .checks import Checks, Panel, holds
from .context import Context
from .emulator.blockstore import EBS_BLOCK
from .emulator.faults import CREDENTIALS_SECONDS, FaultList, StateFault
from .execution import ExecutionResult
from .facts import DELIVERED_TAG, OBJECT_LEAK, Run, direct_writes
from .options import Options
from .picture import block_picture

THROTTLED_ERROR = "Lambda.TooManyRequestsException"


def _doc(meaning: str) -> dict[str, str]:
    """A report field's metadata: its meaning, as the docs' table shows it."""
    return {"doc": meaning}


@dataclass
class Report:
    scenario: dict[str, Any] = field(
        metadata=_doc(
            "`fs`, `input`, `target` (TARGET, null: none given), `trigger`, `fault`, `os`, "
            "`boot_mode`, `dry_run`, `encrypted` (the source snapshots') of the run"
        )
    )
    fault: str = field(
        metadata=_doc("KIND@STATE (several joined by `+`), the named fault, or `none`")
    )
    fault_applied: dict[str, Any] | None = field(
        metadata=_doc(
            "one KIND@STATE fault: `{kind, state, applied, detail}` (whether the run reached the "
            "state, and what happened); several: `{fault, applied (all of them), detail}`"
        )
    )
    faults_applied: list[dict[str, Any]] = field(
        metadata=_doc("`{fault, applied, detail}` per KIND@STATE fault")
    )
    execution_name: str | None = field(metadata=_doc("the execution's name (none for `bad-input`)"))
    execution_input: Any = field(metadata=_doc("the execution's input"))
    target: str | None = field(
        metadata=_doc(
            "the workflow report's `target`: `snapshot` (the new snapshots written with the EBS "
            "direct APIs) or `volume` (target volumes, then CreateSnapshot); null without a report"
        )
    )
    execution_status: str = field(
        metadata=_doc(
            "SUCCEEDED, FAILED, TIMED_OUT or ABORTED (`bad-input`: the cases' status, or MIXED)"
        )
    )
    error: str | None = field(metadata=_doc("the execution's error name"))
    cause: str | None = field(metadata=_doc("the execution's error cause"))
    outcome: str | None = field(metadata=_doc("the workflow report's outcome"))
    delivered: bool = field(
        metadata=_doc(f"state `Delivered` visited or new snapshots tagged `{DELIVERED_TAG}`")
    )
    cleanup: str | None = field(metadata=_doc("the cleanup run's status, when one ran"))
    cleanup_runs: list[dict[str, Any]] = field(
        metadata=_doc("each target of the cleanup path (rule, target, kind, status, error, ...)")
    )
    states_visited: list[str] = field(metadata=_doc("every state entered, in order"))
    state_durations: list[dict[str, Any]] = field(
        metadata=_doc("`{state, type, seconds}` per state left")
    )
    phase_seconds: dict[str, float] | None = field(
        metadata=_doc("the workflow report's `phaseSeconds`")
    )
    source_snapshot_ids: list[str] = field(metadata=_doc("the source snapshots"))
    source_image_id: str | None = field(metadata=_doc("the source AMI (INPUT=ami)"))
    source_snapshot_chunks: int = field(
        metadata=_doc("written 512 KiB blocks of the source snapshots")
    )
    source_snapshot_bytes: int = field(metadata=_doc("the same in bytes"))
    new_snapshot_ids: list[str] = field(
        metadata=_doc(
            "every snapshot CreateSnapshot or StartSnapshot made during the run, from the "
            "emulator, not only from a SUCCEEDED output"
        )
    )
    delivered_snapshot_ids: list[str] = field(
        metadata=_doc(
            "of them, those the run delivered: its output's and every one ever tagged delivered "
            "(the emulator keeps every tag put); a direct snapshot of an attempt that failed or "
            "lost its instance is none of them"
        )
    )
    new_snapshots_existing: int = field(metadata=_doc("how many of them still exist"))
    new_snapshot_ids_existing: list[str] = field(metadata=_doc("which of them still exist"))
    new_image_id: str | None = field(metadata=_doc("the AMI the run registered"))
    new_image_existing: bool = field(metadata=_doc("whether it still exists"))
    new_snapshot_chunks: int = field(metadata=_doc("written 512 KiB blocks of the new snapshots"))
    new_snapshot_bytes: int = field(metadata=_doc("the same in bytes"))
    bytes_read_from_source: int = field(
        metadata=_doc("`sourceBytesRead` summed over the output's volumes")
    )
    bytes_written_to_target: int = field(
        metadata=_doc("`targetBytesWritten` summed over the output's volumes")
    )
    files_verified: bool = field(
        metadata=_doc(
            "every file of every new snapshot equals its source's, on every restore of it"
        )
    )
    fsck_clean: bool = field(metadata=_doc("fsck found nothing on any restore of any new snapshot"))
    restores_checked: list[str] = field(
        metadata=_doc(
            "the restores the files and fsck ran on, `NEW-SNAPSHOT: encrypted|unencrypted` "
            "(volumes made from the new snapshot: encrypted, blocks it does not hold read as "
            "random bytes; unencrypted, as zeros; an encrypted snapshot has no unencrypted one)"
        )
    )
    blocks_exact: bool = field(
        metadata=_doc(
            "every new snapshot holds no block its source does not hold, and every block the "
            "source holds that a file's data needs (FIEMAP on the recovered source)"
        )
    )
    verification: list[dict[str, Any]] = field(
        metadata=_doc(
            "per new snapshot: `restores` (per restore: its volume, KMS key, files checked, "
            "fsck, problems), the totals, and `blocks` (held, new, file blocks held, those "
            "missing, those beyond the held ones, `holds`)"
        )
    )
    leaked_resources: int = field(
        metadata=_doc(
            "what is left after the cleanup path: instances not terminated, volumes, snapshots and "
            "AMIs of the execution other than delivered outputs, loop devices, objects left in the "
            "stack's buckets"
        )
    )
    leaked_objects: int = field(metadata=_doc("how many of the leaked resources are S3 objects"))
    leaks: list[str] = field(metadata=_doc("each leaked resource"))
    source_snapshot_unchanged: bool = field(
        metadata=_doc(
            "the source snapshots' data, size, description, encryption and tags as before"
        )
    )
    instances_launched: int = field(metadata=_doc("transfer instances launched"))
    lambda_invocations: int = field(metadata=_doc("Lambda invocations of the execution"))
    throttled_invocations: int = field(metadata=_doc(f"of them answered {THROTTLED_ERROR}"))
    throttled_requests: dict[str, int] = field(
        metadata=_doc("AWS requests answered with throttling errors, per state (`throttle@STATE`)")
    )
    handlers_called: list[str] = field(
        metadata=_doc("handler modules in call order, repeated calls shown once")
    )
    spot_capacity_errors: int = field(
        metadata=_doc("Spot requests answered InsufficientInstanceCapacity")
    )
    harsh: dict[str, int] = field(
        metadata=_doc(
            "how many answers the eventual-consistency lags changed (tag-filtered answers lagging, "
            "snapshot in-use answers)"
        )
    )
    direct_writes: dict[str, int] = field(
        metadata=_doc(
            "the EBS direct writes the emulator served: snapshots started, puts accepted, puts "
            "answered throttling or the concurrency limit, puts corrupted in transit, deletes of "
            "pending direct snapshots refused (the `put-*` and `pending-delete-refused` faults)"
        )
    )
    swept_later: list[dict[str, Any]] = field(
        metadata=_doc(
            "FAULT=pending-delete-refused: the sweeper's runs once the direct snapshots teardown "
            "left to time out are `error` and its grace period has passed (the clock moved on, "
            "twin/later.py): what each run removed"
        )
    )
    trigger: dict[str, Any] = field(
        metadata=_doc("TRIGGER=tag: events, each delivery's answer, executions started")
    )
    retriggered_executions: int = field(
        metadata=_doc("executions the tags the workflow put on its results started (must be 0)")
    )
    image: dict[str, Any] = field(
        metadata=_doc(
            "INPUT=ami: the new AMI's attributes against the source's, its fast snapshot restores"
        )
    )
    new_image_boots: bool | None = field(
        metadata=_doc(
            "OS=debian: the new AMI's root volume, restored as a launch makes it (every "
            "restore: encrypted, and unencrypted for an unencrypted snapshot), booted in QEMU "
            "through its own bootloader, with "
            "the firmware of the AMI's boot mode (legacy-bios: SeaBIOS, uefi: OVMF), to an init "
            "that found its mounts and `dpkg --verify` clean; a dead end or the timeout is false; "
            "null without OS=debian or without a new AMI"
        )
    )
    new_image_boot_seconds: float | None = field(
        metadata=_doc("from QEMU's start to the guest's power-off (or the failure)")
    )
    source_image_boots: bool | None = field(
        metadata=_doc(
            "OS=debian, when the new AMI did not boot (or there is none): the same boot of the "
            "source AMI's root volume, to tell a broken copy from a broken set-up; else null"
        )
    )
    source_image_boot_seconds: float | None = field(metadata=_doc("its seconds"))
    boot_proof: dict[str, Any] = field(
        metadata=_doc(
            "OS=debian, per boot (`new` encrypted, `new-unencrypted`, `source` encrypted): "
            "the AMI, its root snapshot, the restore booted, boot mode, firmware, "
            "`boots`, `seconds`, the BOOT-CHECK line, milestones, the console log and, on "
            "failure, the console's last lines (`console_tail`)"
        )
    )
    bad_input_cases: list[dict[str, Any]] = field(
        metadata=_doc(
            "FAULT=bad-input: per case its error, the expected one, and whether it created nothing"
        )
    )
    workflow_report: Any = field(
        metadata=_doc("the workflow's own report (the Report task's output)")
    )
    dry_run: bool = field(metadata=_doc("DRY_RUN=1: the execution input said `dryRun: true`"))
    snapshots_created: int = field(
        metadata=_doc("CreateSnapshot calls the run made, counted by the emulator (a dry run: 0)")
    )
    estimate: dict[str, Any] | None = field(
        metadata=_doc("DRY_RUN=1: the workflow report's `estimate` (its totals), else null")
    )
    predicted_stored_bytes: int | None = field(
        metadata=_doc(
            "DRY_RUN=1: `estimate.predictedStoredBytes`, what a compaction's new snapshots would "
            "store (512 KiB blocks the copy would write)"
        )
    )
    notes: list[str] = field(metadata=_doc("what the twin changed or saw on the way"))
    transfer_instances: list[dict[str, Any]] = field(
        metadata=_doc("which disk each transfer instance booted from")
    )
    iam_denials: list[str] = field(
        metadata=_doc(
            "every AWS call of the Lambdas and of the transfer instance (its EBS direct calls, "
            "judged by the instance role) the synthesized roles (conditions included) would deny"
        )
    )
    twin_seconds: float = field(metadata=_doc("how long the scenario took"))
    holds: bool = field(
        default=False,
        metadata=_doc(
            "the invariants: nothing leaked, no IAM denial, the source unchanged, every new "
            "snapshot checked exact (`blocks` holds, files and fsck on every restore), and once "
            "delivered the new snapshots (and the AMI) still exist"
        ),
    )
    picture: str = field(default="", metadata=_doc("the block picture (blocks.svg)"))

    def as_dict(self) -> dict[str, Any]:
        """The report.json object: every field, in order (values as they are, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def fields_table() -> str:
    """The Markdown table of the report's fields and their meanings (docs/twin.md)."""
    rows = [[f"`{f.name}`", f.metadata["doc"]] for f in fields(Report)]
    return table(["field", "meaning"], rows) + "\n"


def fault_label(fault: StateFault | FaultList | str | None) -> str:
    return "none" if fault is None else str(fault)


# --- building -----------------------------------------------------------------------------------


def build(ctx: Context, run: Run, checks: Checks, started: float) -> Report:
    report = Report(
        **_execution_fields(ctx, run),
        **_snapshot_fields(ctx, run, checks),
        **_run_fields(ctx, run, checks),
        twin_seconds=round(time.monotonic() - started, 1),
    )
    row = report.as_dict()
    report.holds = (
        holds(row)
        if run.result
        else not run.leaks and checks.source_unchanged and not checks.iam_denials
    )
    return report


def _execution_fields(ctx: Context, run: Run) -> dict[str, Any]:
    primary, facts, cleanup = run.result, run.facts, run.cleanup
    opts = ctx.opts
    label = fault_label(ctx.fault)
    return {
        "scenario": _scenario(opts, label),
        "fault": label,
        "fault_applied": _fault_applied(ctx, primary),
        "faults_applied": _faults_applied(ctx, primary),
        "execution_name": primary.name if primary else None,
        "execution_input": primary.input if primary else None,
        "target": _target(primary),
        "execution_status": primary.status if primary else _cases_status(run.cases),
        "error": primary.error if primary else None,
        "cause": primary.cause if primary else None,
        "outcome": facts.outcome if facts else None,
        "delivered": facts.delivered if facts else False,
        "cleanup": cleanup[0]["status"] if cleanup and "status" in cleanup[0] else None,
        "cleanup_runs": cleanup,
        "states_visited": primary.states_visited if primary else [],
        "state_durations": primary.state_seconds if primary else [],
        "phase_seconds": (primary.workflow_report or {}).get("phaseSeconds") if primary else None,
    }


def _snapshot_fields(ctx: Context, run: Run, checks: Checks) -> dict[str, Any]:
    source, facts, outputs = ctx.registered, run.facts, run.outputs
    source_chunks = sum(run.source_chunks.values())
    verification = checks.verification
    return {
        "source_snapshot_ids": source.snapshot_ids,
        "source_image_id": source.image_id,
        "source_snapshot_chunks": source_chunks,
        "source_snapshot_bytes": source_chunks * EBS_BLOCK,
        "new_snapshot_ids": facts.new_snapshot_ids if facts else [],
        "delivered_snapshot_ids": facts.delivered_ids if facts else [],
        "new_snapshots_existing": len(facts.existing) if facts else 0,
        "new_snapshot_ids_existing": facts.existing if facts else [],
        "new_image_id": facts.new_image_id if facts else None,
        "new_image_existing": facts.new_image_existing if facts else False,
        "new_snapshot_chunks": checks.new_chunks_total,
        "new_snapshot_bytes": checks.new_chunks_total * EBS_BLOCK,
        "bytes_read_from_source": sum(int(v.get("sourceBytesRead") or 0) for v in outputs),
        "bytes_written_to_target": sum(int(v.get("targetBytesWritten") or 0) for v in outputs),
        "files_verified": bool(verification) and all(v["files_verified"] for v in verification),
        "fsck_clean": bool(verification) and all(v["fsck_clean"] for v in verification),
        "restores_checked": [
            f"{v['newSnapshotId']}: {r['restore']}"
            for v in verification
            for r in v.get("restores", [])  # none diskless: the replayed blocks are compared
        ],
        "blocks_exact": bool(verification)
        and all(v.get("blocks", {}).get("holds", True) for v in verification),
        "verification": verification,
    }


def _run_fields(ctx: Context, run: Run, checks: Checks) -> dict[str, Any]:
    primary, counts, leaks = run.result, run.counts, run.leaks
    invocations = primary.invocations if primary else []
    return {
        "leaked_resources": len(leaks),
        "leaked_objects": sum(1 for leak in leaks if leak.startswith(OBJECT_LEAK)),
        "leaks": leaks,
        "source_snapshot_unchanged": checks.source_unchanged,
        "instances_launched": counts.instances_launched,
        "lambda_invocations": len(invocations),
        "throttled_invocations": sum(1 for i in invocations if i["error"] == THROTTLED_ERROR),
        "throttled_requests": counts.throttled_requests,
        "handlers_called": _handlers_called(ctx.d, primary) if primary else [],
        "spot_capacity_errors": counts.spot_capacity_errors,
        "harsh": counts.harsh,
        "direct_writes": counts.direct_writes,
        "swept_later": ctx.swept_later,
        "trigger": ctx.trigger,
        "retriggered_executions": ctx.trigger.get("retriggered_executions", 0),
        "image": checks.image,
        **_boot_fields(checks),
        "bad_input_cases": run.cases,
        "workflow_report": primary.workflow_report if primary else None,
        **_dry_run_fields(ctx, run),
        "notes": ctx.notes,
        "transfer_instances": counts.transfer_instances,
        "iam_denials": checks.iam_denials,
    }


def _dry_run_fields(ctx: Context, run: Run) -> dict[str, Any]:
    estimate = run.facts.estimate if run.facts else None
    return {
        "dry_run": ctx.opts.dry_run,
        "snapshots_created": run.facts.snapshots_created if run.facts else 0,
        "estimate": estimate,
        "predicted_stored_bytes": estimate.get("predictedStoredBytes") if estimate else None,
    }


def _scenario(opts: Options, fault: str) -> dict[str, Any]:
    return {"fs": opts.fs, "input": opts.input, "target": opts.target, "trigger": opts.trigger,
            "fault": fault, "os": opts.os, "boot_mode": opts.ami_boot_mode,
            "dry_run": opts.dry_run, "encrypted": opts.encrypted}  # fmt: skip


def _target(result: ExecutionResult | None) -> str | None:
    """What the workflow says it wrote: its report's `target` (the Report task's output, or the
    failure/warnings report)."""
    for candidate in (result.output, result.workflow_report) if result else ():
        if isinstance(candidate, dict) and candidate.get("target"):
            return str(candidate["target"])
    return None


def _boot_fields(checks: Checks) -> dict[str, Any]:
    new, source = checks.boots.get("new") or {}, checks.boots.get("source") or {}
    news = [boot for role, boot in checks.boots.items() if role.startswith("new")]
    return {
        "new_image_boots": all(boot["boots"] for boot in news) if news else None,
        "new_image_boot_seconds": new.get("seconds"),
        "source_image_boots": source.get("boots"),
        "source_image_boot_seconds": source.get("seconds"),
        "boot_proof": checks.boots,
    }


def _faults_applied(ctx: Context, result: ExecutionResult | None) -> list[dict[str, Any]]:
    """Per KIND@STATE fault of the run: [{fault, applied, detail}], in the order given."""
    out = []
    for applied in result.faults if result is not None else []:
        fault = StateFault(applied["kind"], applied["state"])
        detail = applied.get("detail")
        if fault.kind == "throttle" and applied.get("applied"):
            served = ctx.emu.state.throttled_served.get(fault.state, 0)
            detail = f"{served} AWS requests of this state answered with throttling errors"
        out.append({"fault": str(fault), "applied": bool(applied.get("applied")), "detail": detail})
    return out


# FAULT=<an EBS behaviour> -> the direct_writes count (facts.py) of the times the run met it
_BEHAVIOUR_MET = {
    "ebs-not-found": ("not_found_after_start", "answers 'snapshot does not exist' after start"),
    "ebs-long-seal": ("not_found_while_sealing", "reads answered ResourceNotFound while sealing"),
    "ebs-account-quota": ("puts_over_quota", "puts throttled over the account's quota"),
    "credentials-near-expiry": (
        "role_credentials_issued",
        f"role credential sets used with {CREDENTIALS_SECONDS:g} s left",
    ),
}


def _behaviour_met(ctx: Context, counts: dict[str, int]) -> dict[str, Any] | None:
    """{kind, state "-", applied, detail} of an EBS behaviour fault: applied once the run met it."""
    if not isinstance(ctx.fault, str) or ctx.fault not in _BEHAVIOUR_MET:
        return None
    counter, what = _BEHAVIOUR_MET[ctx.fault]
    met = int(counts.get(counter, 0))
    return {"kind": ctx.fault, "state": "-", "applied": met > 0, "detail": f"{met} {what}"}


def _fault_applied(ctx: Context, result: ExecutionResult | None) -> dict[str, Any] | None:
    """The single-fault shape: {kind, state, applied, detail} for one fault; for several,
    {fault, applied (all of them), detail (each one's)}; for an EBS behaviour whether the run
    met it; None without a KIND@STATE fault."""
    behaviour = _behaviour_met(ctx, direct_writes(ctx.emu))
    if behaviour is not None:
        return behaviour
    each = _faults_applied(ctx, result)
    if not each:
        return None
    if len(each) == 1:
        kind, _, state = each[0]["fault"].partition("@")
        return {"kind": kind, "state": state, "applied": each[0]["applied"],
                "detail": each[0]["detail"]}  # fmt: skip
    return {
        "fault": "+".join(f["fault"] for f in each),
        "applied": all(f["applied"] for f in each),
        "detail": "; ".join(f"{f['fault']}: {f['detail'] or 'never reached'}" for f in each),
    }


def _handlers_called(d: Deployment, result: ExecutionResult) -> list[str]:
    """Handler modules in call order, repeated calls (poll loops, retries) shown once."""
    module = {f.name: f.handler.rsplit(".", 2)[-2] for f in d.functions.values()}
    called: list[str] = []
    for invocation in result.invocations:
        name = module.get(invocation["function"], invocation["function"])
        if not called or called[-1] != name:
            called.append(name)
    return called


def _cases_status(cases: list[dict[str, Any]]) -> str:
    statuses = {c["execution_status"] for c in cases}
    return statuses.pop() if len(statuses) == 1 else "MIXED"


# --- writing ------------------------------------------------------------------------------------


def write(report: Report, opts: Options, panels: list[Panel]) -> dict[str, Any]:
    """report.json and the block picture (blocks.svg, unless opts.picture is off) in opts.out_dir;
    returns the report.json object."""
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    picture = opts.out_dir / "blocks.svg"
    if opts.picture:
        picture.write_text(block_picture(panels))
    report.picture = str(picture)
    row = report.as_dict()
    (opts.out_dir / "report.json").write_text(json.dumps(row, indent=2, default=str) + "\n")
    return row
