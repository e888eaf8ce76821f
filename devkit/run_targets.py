"""Runs the targets of `make test` / `make check` in lanes: the targets of a lane one after the
other, the lanes side by side. Most of the suite waits (the twin's emulated AWS, loop devices,
QEMU) rather than computes, so on two cores the lanes overlap instead of queueing.

Each target's output goes to out/test-reports/<target>.log and is printed whole when the target
ends, so that the lanes' lines never interleave. Every target runs even when another failed; the
run fails if any did. times.tsv gets a row per target (target, rc, seconds, CPU seconds), read by
devkit/test_report.py.

usage: python -m devkit.run_targets --vars "TIER=unit" "lint test-lambdas" "test-twin" ...
(each positional argument is a lane: its targets separated by spaces)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from devkit.test_report import REPORTS


def _run(target: str, make_vars: list[str], reports: Path) -> int:
    log = reports / f"{target}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        make = subprocess.Popen(
            ["make", "--no-print-directory", target, *make_vars],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        # wait4: the CPU time of this target's processes (those waited for), not the other lanes'
        _, status, usage = os.wait4(make.pid, 0)
        make.returncode = rc = os.waitstatus_to_exitcode(status)
    seconds = int(time.monotonic() - started)
    cpu = int(usage.ru_utime + usage.ru_stime)
    with _print_lock:
        sys.stdout.write(
            f"==> make {target} {' '.join(make_vars)} (rc {rc}, {seconds} s, cpu {cpu} s)\n"
        )
        text = log.read_text(errors="replace")
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        sys.stdout.flush()
        with open(reports / "times.tsv", "a") as times:
            times.write(f"{target}\t{rc}\t{seconds}\t{cpu}\n")
    return rc


_print_lock = threading.Lock()


def run_lanes(lanes: list[list[str]], make_vars: list[str], reports: Path) -> list[str]:
    """The targets that failed."""
    failed: list[str] = []

    def lane(targets: list[str]) -> None:
        for target in targets:
            if _run(target, make_vars, reports) != 0:
                failed.append(target)

    threads = [threading.Thread(target=lane, args=(targets,)) for targets in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vars", default="", help="make variables of every target: TIER=unit")
    parser.add_argument("lanes", nargs="+", help="one lane: its targets separated by spaces")
    args = parser.parse_args()
    reports = REPORTS
    reports.mkdir(parents=True, exist_ok=True)
    failed = run_lanes([lane.split() for lane in args.lanes], args.vars.split(), reports)
    if failed:
        print(f"FAILED: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
