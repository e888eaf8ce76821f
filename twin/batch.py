"""A batch in the twin (`make demo BATCH=N`, test/twin/test_batch.py): N-1 dirty-disk source
snapshots (the single demo's disk, one seed each) and one item that cannot succeed (a snapshot id
that does not exist), started as one execution of the batch workflow (the template's, or the
hand-written one of twin/batch_definition.py); its Distributed Map runs each item as a child
execution of the main workflow with real copies on loop devices (twin/runner). Then the cleanup
path for every failed child (as EventBridge would start it), the leak check over the whole batch,
and out/demo/batch-report.json (twin/batch_report.py)."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import disks
from .batch_definition import handwritten_machine, resolved
from .batch_report import build, write
from .context import Context, setup
from .emulator.faults import Faults, parse
from .emulator.server import Emulator
from .execution import ExecutionResult, Machine, machine_of_role
from .options import Options
from .runs import cleanup_path, run_execution
from .source import SOURCE_TAGS

MISSING_SNAPSHOT = "snap-0badc0ffee0000000"  # the bad item: a well-formed id of no snapshot
HANDWRITTEN_BUCKET = "twin-batch-results"


@dataclass
class BatchRun:
    """One batch execution and what it left: its result, the items, their children's cleanup."""

    name: str
    batch_input: dict[str, Any]
    machine: Machine
    items: list[str]
    result: ExecutionResult
    cleanup: list[dict[str, Any]]
    seconds: float


def sources(ctx: Context, count: int) -> list[str]:
    """`count` source snapshots: the scenario's registered one, then more dirty disks (seeds
    opts.seed + 1, + 2, ...), each registered like it."""
    ids = list(ctx.registered.snapshot_ids)
    for k in range(1, count):
        disk = disks.build(ctx.opts.fs, ctx.work / f"source-{k}.img", ctx.opts.seed + 100 * k)
        ids.append(
            ctx.emu.register_snapshot(disk.path, f"twin batch: dirty disk {k}", dict(SOURCE_TAGS))
        )
        disk.path.unlink(missing_ok=True)
    return ids[:count]


def batch_machine(ctx: Context) -> Machine:
    """The template's batch workflow, or the hand-written one (with a results bucket)."""
    machine = machine_of_role(ctx.opts.cdk_out, ctx.machines, "batch")
    if machine is not None:
        return machine
    s3 = ctx.emu.boto3_client("s3")
    if HANDWRITTEN_BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=HANDWRITTEN_BUCKET)
    return handwritten_machine(ctx.d.region, ctx.d.account, ctx.main.arn, HANDWRITTEN_BUCKET)


def batch_input(
    machine: Machine, name: str, ids: list[str], max_concurrency: int, tolerated: int
) -> dict[str, Any]:
    """The batch input (batch-input.schema.json): explicit items; the hand-written workflow gets
    resolve_batch's result instead (it has no resolve step)."""
    if machine.logical_id == "TwinHandwrittenBatch":
        return {"batch": resolved(name, ids, max_concurrency, tolerated)}
    return {
        "items": [{"snapshotId": sid} for sid in ids],
        "maxConcurrency": max_concurrency,
        "toleratedFailurePercentage": tolerated,
    }


def play(ctx: Context, items: list[str], max_concurrency: int, tolerated: int = 100,
         extra: dict[str, Any] | None = None) -> BatchRun:  # fmt: skip
    """Run one batch of `items` (snapshot ids) to its end, then the cleanup path of each failed
    child and of the batch itself. `extra`: more batch input keys (e.g. minSavingsPercent; the
    template's workflow only)."""
    started = time.monotonic()
    machine = batch_machine(ctx)
    name = f"batch-{uuid.uuid4().hex[:10]}"
    given = {**batch_input(machine, name, items, max_concurrency, tolerated), **(extra or {})}
    result = run_execution(ctx, given, name=name, machine=machine, fault=False)
    cleanup = cleanup_path(ctx, result)
    for child in result.child_executions:
        if child["status"] in ("FAILED", "TIMED_OUT", "ABORTED"):
            cleanup += cleanup_path(ctx, _child_result(child, ctx))
    return BatchRun(name, given, machine, items, result, cleanup, time.monotonic() - started)


def _child_result(child: dict[str, Any], ctx: Context) -> ExecutionResult:
    """A child execution as the cleanup path reads it (status, ARNs, name, input)."""
    return ExecutionResult(
        name=child["name"],
        input=child["input"],
        status=child["status"],
        output=child["output"],
        error=child["error"],
        cause=child["cause"],
        events=[],
        invocations=[],
        execution_arn=child["executionArn"],
        state_machine_arn=child["stateMachineArn"],
    )


def run(opts: Options) -> dict[str, Any]:
    """`make demo BATCH=N`: N items (N-1 snapshots and the missing one) at the default
    concurrency and tolerance; writes OUT/batch-report.json and returns it."""
    opts.validate()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="twin-batch-"))
    logdir = opts.out_dir / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    try:
        fault = parse(opts.fault)  # none, or ebs-account-quota (Options.validate)
        with Emulator(work / "emulator", Faults.of(fault)) as emu:
            ctx = setup(emu, opts, fault, work, logdir)
            good = sources(ctx, opts.batch - 1)
            ran = play(ctx, [*good, MISSING_SNAPSHOT], opts.batch_concurrency)
            report = build(ctx, ran, time.monotonic() - started)
            return write(report, opts.out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
