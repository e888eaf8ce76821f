"""`make sweep`: every Task state of the synthesized main definition x every fault KIND that
applies, one twin scenario each (the same code path as `make demo FAULT=KIND@STATE`), and the
invariants checked on each: nothing leaked after the cleanup path, the source untouched, and once
delivered the new snapshots (and AMI) still exist.

usage: python -m twin.sweep --cdk-out DIR [--out out/sweep] [--states A,B] [--kinds error,abort]
                            [--workers 2] [--doc docs/sweep.md]

Cases run in `--workers` worker processes (moto's backends are process-wide), one at a time in
each. Writes OUT/results.json (one row per case) and, with --doc, the Markdown table.

A Task state on a recovery path (only entered after a Catch) is never reached by one fault: its
cases run with an "opener" fault first (FAULT=OPENER+KIND@STATE) that leads the run onto that
path; see RECOVERY_OPENERS and openers().
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from devkit import markdown

from .cfn import Deployment
from .deploy import deploy
from .emulator.faults import EBS_BEHAVIOURS, KINDS
from .emulator.server import Emulator
from .execution import Machine, inlined, main_machine, state_machines

REPO = Path(__file__).resolve().parents[1]
# Handlers whose Task states only run for an AMI input (the sweep runs those with INPUT=ami).
AMI_ONLY_HANDLERS = ("register_image", "enable_fast_snapshot_restore")
# The Choice between the two targets: its rule on $.plan.target == "snapshot" leads to the direct
# snapshot path (the default input's), its Default to the target volumes and CreateSnapshot. The
# Task states only the volume path reaches run with `target: "volume"` in the input.
TARGET_CHOICE = "Target is a snapshot?"
# The states of each target's path the table counts the cases through (docs/sweep.md).
TARGET_STATES = (
    TARGET_CHOICE, "Direct snapshot phase", "Direct snapshots", "Snapshot phase",
    "Create snapshots",
)  # fmt: skip
# what produced the table (docs/sweep.md says it)
MODES = {
    False: "real disks (`make sweep-disks`: every case copies the dirty disks on loop devices)",
    True: "diskless (`make sweep`: each case's data plane plans its disks from the recording of "
    "real runs, twin/data_plane_recording.json, and copies onto files; see docs/twin.md, "
    '"Diskless")',
}
ROW_KEYS = (
    "state", "kind", "opener", "input", "execution_status", "error", "outcome", "fault_applied",
    "leaked_resources", "leaks", "new_snapshot_ids", "new_snapshots_existing",
    "new_snapshot_ids_existing", "delivered_snapshot_ids", "new_image_id",
    "new_image_existing",
    "source_snapshot_unchanged", "delivered", "cleanup", "iam_denials", "holds", "seconds",
    "states_visited", "direct_writes",
)  # fmt: skip
# direct_writes counters of AWS's EBS direct behaviours (harsh by default in every case) -> words
BEHAVIOURS_MET = {
    "not_found_after_start": "not found right after StartSnapshot",
    "not_found_while_sealing": "not found while sealing",
    "transient_put_failures": '"Failed to read block data"',
    "completion_answers_lost": "a lost CompleteSnapshot answer",
    "puts_over_quota": "puts over the account's quota",
    "role_credentials_issued": "role credentials near expiry",
}


def _handler_of(d: Deployment, state: dict[str, Any]) -> str:
    arn = state.get("Resource", "")
    if arn not in d.functions:
        arn = (state.get("Parameters") or {}).get("FunctionName", "")
    fn = d.functions.get(arn)
    return fn.handler.rsplit(".", 2)[-2] if fn else ""


def _edges(state: dict[str, Any]) -> list[str]:
    out = [state[k] for k in ("Next", "Default") if state.get(k)]
    out += [c["Next"] for c in state.get("Choices", []) if c.get("Next")]
    out += [c["Next"] for c in state.get("Catch", []) if c.get("Next")]
    return out


def _reachable(states: dict[str, Any], start: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in seen or name not in states:
            continue
        seen.add(name)
        todo += _edges(states[name])
    return seen


# The recovery paths of the main definition, keyed by the state a Catch routes to (the path's
# entry), and the fault that leads a run onto each one. Which Task states lie on each path is
# derived from the definition (openers()); the entries and the openers are checked against it,
# so a renamed state or a changed Catch fails the sweep's plan instead of silently not applying.
# - relaunch: Check compaction catches InstanceLost (the transfer instance was lost mid-copy);
# - warnings: Report catches every error after delivery (the outputs exist, report degrades);
# - failure: Check compaction catches every other error before delivery (it ends the launch
#   attempt, a child execution the sweep sees inlined: execution.inlined(); the parent's
#   `Launch again?` goes on to the failure chain).
RECOVERY_OPENERS = {
    "Instance lost: teardown phase": "lost@Check compaction",
    "Delivered with warnings": "error@Report",
    "Failure": "error@Check compaction",
}


def openers(machine: Machine) -> dict[str, str]:
    """Task state -> the opener fault of the recovery path it lies on, for every Task state a run
    with no error never enters: the states reachable from StartAt without Catch routes and
    without entering a recovery path are the main path; the others are on the path whose entry
    reaches them (without entering another path). Raises SystemExit when the table no longer
    fits the definition or a Task state is on no known path."""
    states = machine.definition.get("States", {})
    tasks = [n for n in machine.task_states() if n in states]
    problems = []
    for entry, opener in RECOVERY_OPENERS.items():
        kind, _, at = opener.partition("@")
        if entry not in states:
            problems.append(f"recovery entry {entry!r} is not a state of the definition")
            continue
        if at not in tasks:
            problems.append(f"opener {opener}: {at!r} is not a Task state")
            continue
        wanted = {"lost": "InstanceLost", "error": "States.ALL"}[kind]
        catches = [c for c in states[at].get("Catch", []) if wanted in c.get("ErrorEquals", [])]
        if not any(entry in _leads_to(states, c.get("Next", "")) for c in catches):
            problems.append(f"opener {opener}: {at!r} has no Catch of {wanted} to {entry!r}")
    if problems:
        raise SystemExit(
            "sweep: RECOVERY_OPENERS no longer fits the definition: " + "; ".join(problems)
        )

    def plain(name: str) -> list[str]:
        return [e for e in _edges_without_catch(states[name]) if e not in RECOVERY_OPENERS]

    def reach(start: list[str]) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            name = todo.pop()
            if name not in seen and name in states:
                seen.add(name)
                todo += plain(name)
        return seen

    main = reach([machine.definition["StartAt"]])
    out: dict[str, str] = {}
    for entry, opener in RECOVERY_OPENERS.items():
        for name in reach([entry]):
            if name in tasks and name not in main:
                out.setdefault(name, opener)
    orphans = [n for n in tasks if n not in main and n not in out]
    if orphans:
        raise SystemExit(
            f"sweep: Task states {orphans} are only entered through a recovery path that "
            "RECOVERY_OPENERS has no opener for; add its entry (the Catch target) there"
        )
    return out


def _leads_to(states: dict[str, Any], start: str) -> set[str]:
    """The states a Catch's target leads to without another Catch or entering a recovery path
    (its entry included): the launch attempt's error ends the child, and the parent's
    `Launch again?` takes it to the failure chain."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen or name not in states:
            continue
        seen.add(name)
        if name not in RECOVERY_OPENERS:
            todo += _edges_without_catch(states[name])
    return seen


def _edges_without_catch(state: dict[str, Any]) -> list[str]:
    out = [state[k] for k in ("Next", "Default") if state.get(k)]
    return out + [c["Next"] for c in state.get("Choices", []) if c.get("Next")]


def volume_only_states(machine: Machine) -> list[str]:
    """Task states a run reaches only with `target: "volume"`: reachable (Catch routes included)
    from StartAt, but not when TARGET_CHOICE always takes its snapshot rule. [] for a definition
    without that Choice (a stack from before the direct path). Raises SystemExit when the Choice
    has no rule on $.plan.target == "snapshot"."""
    states = machine.definition.get("States", {})
    choice = states.get(TARGET_CHOICE)
    if choice is None:
        return []
    snapshot_next = [c["Next"] for c in choice.get("Choices", []) if _is_snapshot_rule(c)]
    if len(snapshot_next) != 1:
        raise SystemExit(
            f"sweep: {TARGET_CHOICE!r} has no single rule $.plan.target == 'snapshot': "
            f"{choice.get('Choices')}"
        )
    restricted = dict(states)
    restricted[TARGET_CHOICE] = {"Type": "Pass", "Next": snapshot_next[0]}
    start = [machine.definition["StartAt"]]
    snapshot_path = _reachable(restricted, start)
    return [n for n in machine.task_states() if n in _reachable(states, start)
            and n not in snapshot_path]  # fmt: skip


def _is_snapshot_rule(rule: dict[str, Any]) -> bool:
    """A Choice rule that holds for $.plan.target == "snapshot" (alone or in an And)."""
    parts = rule.get("And", [rule])
    return any(
        p.get("Variable") == "$.plan.target" and p.get("StringEquals") == "snapshot" for p in parts
    )


def instance_states(d: Deployment, machine: Machine) -> list[str]:
    """Task states where a transfer instance can exist: after a launch Task and before a
    teardown Task on some path (exclusive), found from the definition's graph."""
    states = machine.definition.get("States", {})
    handlers = {n: _handler_of(d, s) for n, s in states.items() if s.get("Type") == "Task"}
    launches = [n for n, h in handlers.items() if h == "launch"]
    teardowns = {n for n, h in handlers.items() if h == "teardown"}
    after_launch = _reachable(states, [e for n in launches for e in _edges(states[n])])
    reaches_teardown = {n for n in states if _reachable(states, _edges(states[n])) & teardowns}
    return [
        n
        for n in handlers
        if n in after_launch and n in reaches_teardown and n not in teardowns
        and n not in launches
    ]  # fmt: skip


def plan(cdk_out: Path, states: list[str] | None, kinds: list[str] | None) -> list[dict[str, str]]:
    """The cases: (state, kind, opener, input, target) for every Task state x every applicable
    kind; opener is "" for a state on the main path; target is "volume" for a state only the
    volume path reaches, else "" (the input names no target: the default, snapshot)."""
    with (
        tempfile.TemporaryDirectory(prefix="twin-sweep-plan-") as work,
        Emulator(Path(work) / "emulator") as emu,
    ):
        d = deploy(emu, cdk_out)
        machines = state_machines(d, cdk_out)
        # one graph: the launch attempt's states in place of the Task that starts it
        main = inlined(main_machine(d, machines, cdk_out), machines)
        tasks = main.task_states()
        with_instance = set(instance_states(d, main))
        opener_of = openers(main)
        volume_only = set(volume_only_states(main))
        handlers = {n: _handler_of(d, main.definition["States"].get(n, {})) for n in tasks}
    unknown = sorted(set(states or []) - set(tasks))
    if unknown:
        raise SystemExit(f"sweep: {unknown} are not Task states; the Task states are: {tasks}")
    bad_kinds = sorted(set(kinds or []) - set(KINDS) - set(EBS_BEHAVIOURS))
    if bad_kinds:
        raise SystemExit(
            f"sweep: unknown kinds {bad_kinds}; choose from {[*KINDS, *EBS_BEHAVIOURS]}"
        )
    cases = []
    for state in tasks:
        if states and state not in states:
            continue
        for kind in KINDS:
            if kinds and kind not in kinds:
                continue
            if kind == "lost" and state not in with_instance:
                continue
            ami = handlers.get(state) in AMI_ONLY_HANDLERS
            cases.append({"state": state, "kind": kind, "opener": opener_of.get(state, ""),
                          "input": "ami" if ami else "snapshot",
                          "target": "volume" if state in volume_only else ""})  # fmt: skip
    return cases + behaviour_cases(states, kinds)


def behaviour_cases(states: list[str] | None, kinds: list[str] | None) -> list[dict[str, str]]:
    """One whole run per EBS_BEHAVIOUR (FAULT=<name>: not bound to a state, state "-"), the
    default input (target snapshot); left out when STATES names states."""
    if states:
        return []
    return [{"state": "-", "kind": name, "opener": "", "input": "snapshot", "target": ""}
            for name in EBS_BEHAVIOURS if not kinds or name in kinds]  # fmt: skip


def run_case(cdk_out: Path, case: dict[str, str], out: Path, fs: str = "ext4",
             diskless: bool = False) -> dict[str, Any]:  # fmt: skip
    """One case, in this process (moto's backends are process-wide: one case at a time in a
    process); returns its row. A case the twin itself could not run is a TWIN-ERROR row."""
    from .scenario import Options, run

    slug = f"{case['kind']}-{case['state']}".replace(" ", "_").replace("/", "_")
    fault = case["kind"] if case["state"] == "-" else f"{case['kind']}@{case['state']}"
    if case.get("opener"):
        fault = f"{case['opener']}+{fault}"
    started = time.monotonic()
    try:
        opts = Options(fs=fs, input=case["input"], fault=fault, cdk_out=cdk_out,
                       out_dir=out / "cases" / slug, picture=False,
                       target=case.get("target") or None, diskless=diskless)  # fmt: skip
        report = run(opts)
    except Exception:  # the row says what broke; the other cases still run
        return {
            **case, "execution_status": "TWIN-ERROR", "error": traceback.format_exc()[-2000:],
            "outcome": None, "holds": False, "leaked_resources": None,
            "seconds": round(time.monotonic() - started, 1),
        }  # fmt: skip
    applied = report.get("fault_applied") or {}
    row = {k: report.get(k) for k in ROW_KEYS if k in report}
    row.update(case)
    # applied: every fault of the case (the opener too) fired; per fault in faults_applied
    row["fault_applied"] = bool(applied.get("applied"))
    row["fault_detail"] = applied.get("detail")
    row["faults_applied"] = report.get("faults_applied") or []
    row["workflow_target"] = report.get("target")  # the workflow report's (case: the input's)
    row["seconds"] = round(time.monotonic() - started, 1)
    if case["state"] == "-":
        # the data plane rides through AWS's behaviours: such a run must also succeed and meet it
        row["holds"] = bool(
            row.get("holds") and row["execution_status"] == "SUCCEEDED" and row["fault_applied"]
        )
    return row


def table(rows: list[dict[str, Any]], seconds: float, diskless: bool = False,
          workers: int = 2) -> str:  # fmt: skip
    lines = _header(rows, seconds, diskless, workers)
    return "\n".join([*lines, markdown.table(COLUMNS, map(_cells, rows))]) + "\n"


COLUMNS = ["state", "kind", "opener", "input", "status", "error", "outcome", "applied", "leaked",
           "new snapshots kept", "AMI kept", "source unchanged", "delivered", "cleanup",
           "holds"]  # fmt: skip


def _cells(r: dict[str, Any]) -> list[str]:
    new = f"{r.get('new_snapshots_existing', 0)}/{len(r.get('new_snapshot_ids') or [])}"
    ami = "-" if not r.get("new_image_id") else str(r.get("new_image_existing"))
    error = str(r.get("error") or "")
    error = error if len(error) < 40 else error[:37] + "..."
    target = f", target {r['target']}" if r.get("target") else ""
    return [r["state"], r["kind"], r.get("opener") or "-", f"{r['input']}{target}",
            str(r.get("execution_status")), error, r.get("outcome") or "-",
            str(r.get("fault_applied")), str(r.get("leaked_resources")), new, ami,
            str(r.get("source_snapshot_unchanged")), str(r.get("delivered")),
            r.get("cleanup") or "-", "yes" if r.get("holds") else "**NO**"]  # fmt: skip


def _header(rows: list[dict[str, Any]], seconds: float, diskless: bool, workers: int) -> list[str]:
    """The table's title, what a row means, the counts and the column heads."""
    holding = sum(1 for r in rows if r.get("holds"))
    by_status: dict[str, int] = {}
    for r in rows:
        by_status[str(r.get("execution_status"))] = (
            by_status.get(str(r.get("execution_status")), 0) + 1
        )
    return [
        "# The sweep: a fault at every Task state",
        "",
        "Generated by `make sweep` (twin/sweep.py) from the synthesized definition; do not edit.",
        "Each row is one twin run with `FAULT=KIND@STATE` (INPUT=snapshot, FS=ext4; the states",
        "that only run for an AMI with INPUT=ami, those only the volume path reaches with",
        '`"target": "volume"`), then the cleanup path EventBridge would start.',
        "`holds`: nothing leaked after the cleanup path (no instance left running, no volume, no",
        "snapshot or AMI of the execution other than delivered outputs), the source snapshot",
        "unchanged, once delivered the snapshots it delivered (and the AMI) still exist, every AWS",
        "call the Lambdas and the transfer instance made is allowed by the synthesized roles",
        "(twin/iam).",
        "`applied`: whether the execution reached the state (a fault at a state the run never",
        "enters changes nothing). A state on a recovery path runs with an `opener` fault first",
        "(`FAULT=OPENER+KIND@STATE`) that leads the run onto that path; `applied` is then true",
        "when both faults fired.",
        "",
        f"**{len(rows)} cases, {holding} hold, {len(rows) - holding} do not** "
        f"(statuses: {', '.join(f'{k} {v}' for k, v in sorted(by_status.items()))}; "
        f"{seconds / 60:.1f} minutes, {workers} workers).",
        "",
        f"Mode: {MODES[diskless]}.",
        "",
        "Cases through each target's states (`target` in the input: none, the default snapshot, "
        "or volume for the states only that path reaches): "
        + ", ".join(f"`{name}` {n}" for name, n in target_coverage(rows).items())
        + ".",
        "",
        "AWS's EBS direct behaviours are harsh in every case (twin/emulator/faults.py); cases "
        "that met each: "
        + ", ".join(f"{words} {n}" for words, n in behaviours_met(rows).items())
        + ". The rows of state `-` run one behaviour made stronger for the whole run "
        "(`FAULT=ebs-not-found`, `ebs-long-seal`, `ebs-account-quota`: the account's put quota "
        "at 20 puts/s with a second run putting at the same time, `credentials-near-expiry`: "
        "role credentials from instance metadata valid 17 s); `applied`: the run met it; "
        "`holds` also needs the run to succeed and the behaviour met.",
        "",
    ]


def behaviours_met(rows: list[dict[str, Any]]) -> dict[str, int]:
    """BEHAVIOURS_MET's words -> how many cases met that behaviour at least once."""
    return {
        words: sum(1 for r in rows if (r.get("direct_writes") or {}).get(counter))
        for counter, words in BEHAVIOURS_MET.items()
    }


def target_coverage(rows: list[dict[str, Any]]) -> dict[str, int]:
    """TARGET_STATES -> how many cases entered it."""
    return {
        name: sum(1 for r in rows if name in (r.get("states_visited") or []))
        for name in TARGET_STATES
    }


def sweep(cdk_out: Path, out: Path, states: list[str] | None = None,
          kinds: list[str] | None = None, workers: int = 2,
          pairs: list[str] | None = None,
          diskless: bool = False) -> list[dict[str, Any]]:  # fmt: skip
    """Run the planned cases; `pairs` (["KIND@STATE", ...]) keeps only those; `diskless`: each
    case replays the data plane's disk planning (twin/emulator/replay.py) instead of disks."""
    cases = plan(cdk_out, states, kinds)
    if pairs is not None:
        planned = {f"{c['kind']}@{c['state']}" for c in cases}
        missing = sorted(set(pairs) - planned)
        if missing:
            raise SystemExit(f"sweep: {missing} are not cases of this definition")
        cases = [c for c in cases if f"{c['kind']}@{c['state']}" in pairs]
    out.mkdir(parents=True, exist_ok=True)
    # Worker processes that each run case after case: a case's own process would pay Python's,
    # moto's and the Lambda zygote's start-up again (~4 CPU-seconds). Spawned, not forked: the
    # caller (pytest) has threads. (No max_tasks_per_child: Python 3.11's executor hangs when it
    # replaces a worker, as the first try of this showed after 8 cases a worker.)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        runs = [pool.submit(run_case, cdk_out, c, out, "ext4", diskless) for c in cases]
        return [r.result() for r in runs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twin.sweep", description=__doc__)
    parser.add_argument("--cdk-out", type=Path, default=REPO / "out" / "twin" / "cdk.out")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "sweep")
    parser.add_argument("--states", default=os.environ.get("STATES") or "")
    parser.add_argument("--kinds", default=os.environ.get("KINDS") or "")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS") or 2))
    parser.add_argument("--doc", type=Path, default=None)
    parser.add_argument("--diskless", action="store_true",
                        help="no disks: each case replays the recorded data-plane runs "
                        "(seconds a case, no root); else every case copies real disks")  # fmt: skip
    args = parser.parse_args(argv)
    if os.geteuid() != 0 and not args.diskless:
        print("sweep: needs root (loop devices, mounts); run it as root, or --diskless",
              file=sys.stderr)  # fmt: skip
        return 2
    states = [s for s in args.states.split(",") if s] or None
    kinds = [k for k in args.kinds.split(",") if k] or None
    started = time.monotonic()
    rows = sweep(args.cdk_out, args.out, states, kinds, args.workers, diskless=args.diskless)
    seconds = time.monotonic() - started
    result = {
        "mode": MODES[args.diskless],
        "workers": args.workers,
        "cases": len(rows),
        "holding": sum(1 for r in rows if r.get("holds")),
        "seconds": round(seconds, 1),
        "rows": rows,
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    text = table(rows, seconds, args.diskless, args.workers)
    if args.doc:
        args.doc.write_text(text)
    print(text)
    print(f"sweep: {result['holding']}/{result['cases']} hold; {args.out / 'results.json'}")
    return 0 if result["holding"] == result["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
