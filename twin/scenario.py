"""One twin scenario (`make demo`, a sweep case, a test): build a dirty disk, register it, deploy
the synthesized stack into the emulator, start the execution (API or tag trigger, with a fault),
run the cleanup path EventBridge would start, then check the outcome and write the report.

run() is set-up (twin/context.py), the run (_play: twin/starts.py, twin/runs.py, twin/facts.py),
the checks (twin/checks.py) and the report (twin/report.py).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from . import later
from .checks import check, holds
from .context import Context, setup
from .emulator.blockstore import written_chunks
from .emulator.faults import FAULTS, FaultError, Faults, parse
from .emulator.server import Emulator
from .execution import ExecutionResult
from .facts import Run, counts, facts
from .options import REPO, Options
from .report import build, fault_label, write
from .runs import cleanup_path
from .second_run import SecondRun
from .source import fingerprints
from .starts import start_api, start_bad_inputs, start_tag


def run(opts: Options) -> dict[str, Any]:
    """Run one scenario; returns the report (as written to OUT/report.json)."""
    opts.validate()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="twin-demo-"))
    logdir = opts.out_dir / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    fault = parse(opts.fault)
    try:
        with Emulator(work / "emulator", Faults.of(fault), diskless=opts.diskless) as emu:
            ctx = setup(emu, opts, fault, work, logdir)
            ran = _play(ctx)
            checks = check(ctx, ran)
            return write(build(ctx, ran, checks, started), opts, checks.panels)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _play(ctx: Context) -> Run:
    """Start the execution(s) the options ask for, run the cleanup path, and collect what exists
    at the end."""
    emu, source = ctx.emu, ctx.registered
    source.fingerprints = fingerprints(emu, source)
    source_chunks = {
        sid: len(written_chunks(emu.snapshot_file(sid))) for sid in source.snapshot_ids
    }
    if ctx.fault == "bad-input":
        cases = start_bad_inputs(ctx)
        leaks = [f"{c['case']}: {c['leaked_resources']} resources" for c in cases
                 if c["leaked_resources"]]  # fmt: skip
        return Run(None, cases, [], None, leaks, source_chunks, counts(emu))
    second = SecondRun(emu, ctx.work) if ctx.fault == "ebs-account-quota" else None
    result = start_tag(ctx) if ctx.opts.trigger == "tag" else start_api(ctx)
    cleanup = cleanup_path(ctx, result)
    if second is not None:
        done = second.finish()
        ctx.notes.append(
            f"a second run in the account put {done['blocks']} blocks at the same time and "
            f"completed ({done['verifiedBlocks']} verified)"
        )
    if ctx.fault == "pending-delete-refused":
        _time_passes(ctx, result)
    found = facts(emu, result, source.image_id)
    return Run(result, [], cleanup, found, list(found.leaks), source_chunks, counts(emu))


def _time_passes(ctx: Context, result: ExecutionResult) -> None:
    """The direct snapshots teardown left to time out turn `error` after their Timeout, and the
    scheduled sweeper deletes them: the clock moves on that far (later.py)."""
    left = facts(ctx.emu, result, ctx.registered.image_id).leaks
    minutes = later.minutes_until_swept(later.sweep_function(ctx.d))
    ctx.swept_later = later.sweep_later(ctx.emu, ctx.d, minutes, log=ctx.logdir / "sweep-later.log")
    removed = [r for run in ctx.swept_later for e in run["executions"] for r in e["removed"]]
    ctx.notes.append(
        f"left after the cleanup path: {left}; {minutes} minutes later (the direct snapshot "
        f"Timeout, the sweeper's grace period) the sweeper removed {removed}"
    )


__all__ = ["FAULTS", "REPO", "FaultError", "Options", "fault_label", "holds", "run"]
