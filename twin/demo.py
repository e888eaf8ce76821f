"""`make demo`: the whole workflow on this machine, with a report (see docs/twin.md).

usage: python -m twin.demo [--fs ext4|xfs|ntfs|bare-ext4] [--input snapshot|ami]
                           [--target snapshot|volume] [--trigger api|tag] [--fault KIND@STATE|NAME]
                           [--cdk-out DIR] [--out DIR] [--os none|debian]
                           [--boot-mode legacy-bios|uefi] [--dry-run] [--unencrypted]

TARGET: the execution input's `target`: snapshot (the new snapshot written directly with the EBS
direct APIs) or volume (a target volume, then CreateSnapshot); without it the input names none
and the workflow's default (snapshot) applies.

FAULT: KIND@STATE with KIND one of error, throttle, abort, lost and STATE a Task state of the
synthesized main definition (e.g. error@Report), or one of the named faults.
ENCRYPTED=0 (--unencrypted): the source snapshots are unencrypted (by default they are encrypted
with a customer managed KMS key); the checks then also restore the new snapshots unencrypted.
OS=debian (INPUT=ami): the source AMI's root is a real Debian disk; after the run the new AMI and
the source boot in QEMU with the AMI's boot mode (BOOT_MODE, legacy-bios by default, or uefi).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .emulator.faults import FAULTS, KINDS, FaultError
from .scenario import REPO, Options, run

MIB = 1024 * 1024
TARGET_HOW = {
    "snapshot": "the new snapshots written with the EBS direct APIs",
    "volume": "target volumes, then CreateSnapshot",
}


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.1f} MiB"


def summary(report: dict[str, Any]) -> str:
    """The lines `make demo` prints: the run, what it made and checked, and the details."""
    lines = _run_lines(report) + _result_lines(report) + _detail_lines(report)
    lines.append(f"  report           {report['picture'].rsplit('/', 1)[0]}/report.json")
    lines.append(f"  block picture    {report['picture']}")
    return "\n".join(lines)


def _run_lines(report: dict[str, Any]) -> list[str]:
    """The scenario, the execution's end, the fault, the outcome, cleanup, trigger, states."""
    s = report["scenario"]
    os_label = f" OS={s['os']} BOOT_MODE={s['boot_mode']}" if s.get("os", "none") != "none" else ""
    os_label += " DRY_RUN=1" if s.get("dry_run") else ""
    os_label += "" if s.get("encrypted", True) else " ENCRYPTED=0"
    target = f" TARGET={s['target']}" if s.get("target") else ""
    lines = [
        f"twin demo: FS={s['fs']} INPUT={s['input']}{target} TRIGGER={s['trigger']} "
        f"FAULT={s['fault']}" + os_label,
        f"  execution        {report['execution_name'] or '(one per case)'}: "
        f"{report['execution_status']}"
        + (f" with {report['error']}" if report.get("error") else ""),
    ]
    if report.get("cause"):
        lines.append(f"  cause            {str(report['cause'])[:300]}")
    if report.get("fault_applied"):
        applied = report["fault_applied"]
        lines.append(
            f"  fault            {report['fault']}: "
            + (applied.get("detail") or "applied" if applied.get("applied") else "never reached")
        )
    if report.get("target"):
        lines.append(f"  target           {report['target']} ({TARGET_HOW.get(report['target'])})")
    if report.get("outcome") or report["execution_name"]:
        lines.append(
            f"  outcome          {report.get('outcome')}; delivered {report.get('delivered')}; "
            f"new snapshots existing {report.get('new_snapshots_existing')}"
            f"/{len(report.get('new_snapshot_ids') or [])}"
        )
    for cleanup in report.get("cleanup_runs") or []:
        lines.append(
            f"  cleanup          {cleanup.get('rule')} -> {cleanup.get('kind')}: "
            f"{cleanup.get('status')}"
            + (f" with {cleanup['error']}" if cleanup.get("error") else "")
        )
    trigger = report.get("trigger") or {}
    if trigger:
        lines.append(
            f"  tag trigger      {trigger.get('events')} event(s) delivered "
            f"{len(trigger.get('deliveries', []))} time(s); executions started "
            f"{trigger.get('executions_started')}"
        )
    states = report["states_visited"]
    if states:
        lines.append(f"  states visited   {len(states)}: " + " > ".join(_compress(states)))
    return lines


def _result_lines(report: dict[str, Any]) -> list[str]:
    """Blocks before and after, bytes moved, verification, leaks, the source, instances."""
    return [
        f"  source snapshot  {report['source_snapshot_chunks']} written 512 KiB blocks "
        f"({_mib(report['source_snapshot_bytes'])})",
        f"  new snapshot     {report['new_snapshot_chunks']} written 512 KiB blocks "
        f"({_mib(report['new_snapshot_bytes'])})",
        f"  read from source {_mib(report['bytes_read_from_source'])}, written to target "
        f"{_mib(report['bytes_written_to_target'])}",
        *_block_lists(report),
        *_estimate_lines(report),
        *_verification_lines(report),
        f"  leaked resources {report['leaked_resources']}"
        + (f" {report['leaks']}" if report["leaks"] else ""),
        f"  source unchanged {report['source_snapshot_unchanged']}",
        f"  holds            {report['holds']} (the invariants: nothing leaked, IAM, the source "
        "unchanged, every new snapshot exact, what was delivered exists)",
        f"  instances        {report['instances_launched']} launched; "
        f"{report['lambda_invocations']} Lambda invocations"
        + (
            f" ({report['throttled_invocations']} throttled)"
            if report["throttled_invocations"]
            else ""
        ),
    ]


def _verification_lines(report: dict[str, Any]) -> list[str]:
    """Files and fsck on which restores, and the block rule."""
    if not report["verification"]:
        return ["  verification     not run: no new snapshot"]
    lines = [
        f"  verification     files equal: {report['files_verified']}, "
        f"fsck clean: {report['fsck_clean']}, on restores: " + ", ".join(report["restores_checked"])
    ]
    for row in report["verification"]:
        b = row.get("blocks")
        if b is None:  # diskless: no filesystems, no restores
            continue
        lines.append(
            f"  exact blocks     {row['newSnapshotId']}: {b['holds']} ({b['new']} blocks, "
            f"{b['beyond_held_count']} beyond the source's {b['held']}; "
            f"{b['file_blocks_missing_count']} of {b['file_blocks_held']} held file blocks "
            "missing)"
        )
    for row in report["verification"]:
        lines += [f"  problem          {p}" for p in row["problems"][:5]]
    return lines


def _detail_lines(report: dict[str, Any]) -> list[str]:
    """Boot disks, IAM, time per state and phase, the new AMI, bad-input cases, notes."""
    lines = []
    booted = [i["bootedFrom"] for i in report.get("transfer_instances", [])]
    if booted:
        lines.append(f"  booted from      {', '.join(booted)}")
    direct = report.get("direct_writes") or {}
    if direct.get("snapshots_started"):
        lines.append(
            f"  direct writes    {direct['snapshots_started']} snapshot(s) started, "
            f"{direct['puts_accepted']} blocks put; refused: {direct['puts_throttled']} throttled, "
            f"{direct['puts_concurrent_limit']} over the concurrency limit, "
            f"{direct['puts_corrupted']} corrupted, "
            f"{direct['pending_deletes_refused']} pending deletes"
        )
    lines.append(
        f"  IAM              {len(report.get('iam_denials', []))} of the Lambdas', the transfer "
        "instance's and the state machines' calls denied by the synthesized roles"
        + (f": {report['iam_denials'][:3]}" if report.get("iam_denials") else "")
    )
    if report["state_durations"]:
        lines.append(f"  time per state   {_per_state(report['state_durations'])}")
    if report.get("phase_seconds"):
        phases = ", ".join(f"{k} {v:.1f}s" for k, v in report["phase_seconds"].items())
        lines.append(f"  phases           {phases}")
    image = report.get("image") or {}
    if image:
        lines.append(
            f"  new AMI          {image.get('new_image_id')}: attributes equal "
            f"{image.get('attributes_equal')}, FSR {image.get('fsr')}"
        )
    lines += _boot_lines(report)
    for case in report.get("bad_input_cases", []):
        lines.append(
            f"  bad input        {case['case']}: {case['execution_status']} with {case['error']} "
            f"(expected {case['expected_error']}), created nothing: {case['created_nothing']}"
        )
    for note in report.get("notes", []):
        lines.append(f"  note             {note}")
    return lines


def _boot_lines(report: dict[str, Any]) -> list[str]:
    """OS=debian: whether the new AMI and the source boot, in how long, and on failure the
    console's last lines."""
    proof = report.get("boot_proof") or {}
    if not proof:
        return []
    lines = [] if "new" in proof else ["  new AMI boots    not booted: the run registered no AMI"]
    for role, boot in proof.items():
        label = "new AMI boots   " if role.startswith("new") else "source AMI boots"
        lines.append(
            f"  {label} {str(boot['boots']).lower()} in {boot['seconds']:.1f} s "
            f"({boot['restore']} restore, {boot['boot_mode']}: {boot['firmware']}, "
            f"{boot['interface']}; "
            + (boot["marker"] or boot["fatal"] or "no BOOT-CHECK line")
            + (", timed out" if boot["timed_out"] else "")
            + ")"
        )
        lines += [f"      console {line}" for line in boot["console_tail"]]
    return lines


def _block_lists(report: dict[str, Any]) -> list[str]:
    """What ListSnapshotBlocks said each source holds and how much of it the copy read."""
    workflow = report.get("workflow_report")
    volumes = workflow.get("volumes") if isinstance(workflow, dict) else None
    lines = []
    for volume in volumes or []:
        if volume.get("blockListError"):
            held = f"not listed ({volume['blockListError']}): copied without a list"
        elif volume.get("heldBlocks") is None:
            continue
        else:
            held = f"{volume['heldBlocks']} blocks held (ListSnapshotBlocks)" + (
                f", {volume['heldBlocksRead']} of them read"
                if volume.get("heldBlocksRead") is not None
                else ""  # a dry run reads metadata only and does not count it
            )
        lines.append(f"  block list       volume {volume['index']}: {held}")
    return lines


def _estimate_lines(report: dict[str, Any]) -> list[str]:
    """DRY_RUN=1: the estimate and the snapshots the run made (none)."""
    if not report.get("dry_run"):
        return []
    lines = [f"  snapshots made   {report.get('snapshots_created')} (a dry run makes none)"]
    e = report.get("estimate")
    if not e:
        return [*lines, "  estimate         none: the dry run did not finish"]
    seconds = "-" if e["copySeconds"] is None else f"{e['copySeconds']} s"
    return [
        *lines,
        f"  estimate         source stores {_mib(e['sourceStoredBytes'])}, a compaction would "
        f"store {_mib(e['predictedStoredBytes'])}: {_mib(e['predictedSavingsBytes'])} "
        f"({e['savingsPercent']}%) saved",
        f"  estimate         live {_mib(e['liveBytes'])}, {_mib(e['bytesToRead'])} to read, "
        f"copy about {seconds}",
    ]


def _per_state(durations: list[dict[str, Any]], top: int = 8) -> str:
    """Seconds spent in each state (summed over repeats), the slowest first."""
    totals: dict[str, list[float]] = {}
    for d in durations:
        totals.setdefault(d["state"], []).append(d["seconds"])
    ranked = sorted(totals.items(), key=lambda item: -sum(item[1]))[:top]
    return ", ".join(
        f"{name} {sum(times):.1f}s" + (f" ({len(times)}x)" if len(times) > 1 else "")
        for name, times in ranked
    )


def _compress(states: list[str]) -> list[str]:
    """Poll loops repeat a few states many times: show each repeated run once, with a count."""
    out: list[str] = []
    i = 0
    while i < len(states):
        for width in range(1, 7):
            window = states[i : i + width]
            repeats = 1
            while states[i + repeats * width : i + (repeats + 1) * width] == window:
                repeats += 1
            if repeats > 1:
                out.append(f"({' > '.join(window)}) x{repeats}")
                i += repeats * width
                break
        else:
            out.append(states[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twin.demo", description=__doc__)
    parser.add_argument("--fs", default=os.environ.get("FS") or "ext4")
    parser.add_argument("--input", default=os.environ.get("INPUT") or "snapshot")
    parser.add_argument("--target", default=os.environ.get("TARGET") or None,
                        help="snapshot|volume: the input's target (default: none given, the "
                        "workflow's default, snapshot)")  # fmt: skip
    parser.add_argument("--trigger", default=os.environ.get("TRIGGER") or "api")
    parser.add_argument("--fault", default=os.environ.get("FAULT") or None,
                        help=f"KIND@STATE[+KIND@STATE...] (KIND: {', '.join(KINDS)}) or one of: "
                        + ", ".join(FAULTS))  # fmt: skip
    parser.add_argument("--os", default=os.environ.get("OS") or "none")
    parser.add_argument("--boot-mode", default=os.environ.get("BOOT_MODE") or None)
    parser.add_argument("--batch", type=int, default=int(os.environ.get("BATCH") or 0),
                        help="N: a batch of N items (twin/batch.py)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true",
                        default=os.environ.get("DRY_RUN", "") not in ("", "0"),
                        help='the input says "dryRun": true: an estimate, no snapshot')  # fmt: skip
    parser.add_argument("--diskless", action="store_true",
                        default=os.environ.get("DISKLESS", "") not in ("", "0"),
                        help="no disks: the data plane's disk planning replayed from a recording "
                        "of real runs (twin/emulator/replay.py)")  # fmt: skip
    parser.add_argument("--unencrypted", action="store_true",
                        default=os.environ.get("ENCRYPTED", "1") in ("0", "no", "false"),
                        help="unencrypted source snapshots (ENCRYPTED=0); by default they are "
                        "encrypted with a customer managed KMS key")  # fmt: skip
    parser.add_argument("--cdk-out", type=Path, default=REPO / "cdk.out")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "demo")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and not args.diskless:
        print("twin demo: needs root (loop devices, mounts); run it as root", file=sys.stderr)
        return 2
    opts = Options(
        fs=args.fs, input=args.input, trigger=args.trigger, fault=args.fault,
        cdk_out=args.cdk_out, out_dir=args.out,
        os=args.os or "none", boot_mode=args.boot_mode or None, batch=args.batch,
        dry_run=args.dry_run, target=args.target or None, diskless=args.diskless,
        encrypted=not args.unencrypted,
    )  # fmt: skip
    try:
        opts.validate()
    except ValueError as error:
        print(f"twin demo: {error}", file=sys.stderr)
        return 2
    # A stopped demo still unmounts and detaches what it set up (the emulator's finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if opts.batch:
        from . import batch, batch_report

        print(batch_report.summary_lines(batch.run(opts)))
        return 0
    try:
        report = run(opts)
    except FaultError as error:  # e.g. a state that is not a Task state of the definition
        print(f"twin demo: {error}", file=sys.stderr)
        return 2
    print(summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
