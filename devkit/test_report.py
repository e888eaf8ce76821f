"""The end of `make test` and `make check`: each target's wall time and exit code, and every test
that was skipped, with its reason.

The targets write into out/test-reports/: times.tsv (target, rc, seconds, and the CPU seconds of
its processes when devkit/run_targets.py ran it; the recipe of `make test` adds setup and wall),
one JUnit XML per pytest target (--junitxml) and jest's JSON result (--json).
`python -m devkit.test_report [DIR]` prints the table and the skips."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPORTS = Path("out/test-reports")
WALL = "wall"  # the row of times.tsv with the whole run's time (Makefile, run_lanes)


def timings(reports: Path) -> list[tuple[str, int, int, int | None]]:
    """(target, rc, seconds, CPU seconds or None) in the order the targets ran."""
    path = reports / "times.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        target, rc, seconds, *cpu = line.split("\t")
        rows.append((target, int(rc), int(seconds), int(cpu[0]) if cpu else None))
    return rows


def skips(reports: Path) -> Counter[str]:
    """'target: reason' -> how many tests were skipped for it (pytest's JUnit, jest's JSON)."""
    found: Counter[str] = Counter()
    for xml in sorted(reports.glob("*.xml")):
        for skipped in ET.parse(xml).getroot().iter("skipped"):
            if skipped.get("type") == "pytest.xfail":
                continue
            reason = (skipped.get("message") or "").removeprefix("Skipped: ")
            found[f"{xml.stem}: {reason}"] += 1
    for result in sorted(reports.glob("*.jest.json")):
        for suite in json.loads(result.read_text())["testResults"]:
            for test in suite["assertionResults"]:
                if test["status"] in ("pending", "skipped", "todo"):
                    found[f"{result.name.removesuffix('.jest.json')}: {test['fullName']}"] += 1
    return found


def render(reports: Path) -> str:
    lines = []
    rows = timings(reports)
    walls = [seconds for target, _, seconds, _ in rows if target == WALL]
    rows = [row for row in rows if row[0] != WALL]
    if rows:
        width = max(len(target) for target, *_ in rows)
        lines.append(f"{'target':<{width}}  {'rc':>3}  {'wall':>9}  {'cpu':>9}")
        for target, rc, seconds, cpu in rows:
            used = "" if cpu is None else _minutes(cpu)
            lines.append(f"{target:<{width}}  {rc:>3}  {_minutes(seconds):>9}  {used:>9}")
        # the whole run's time when recorded: the targets' sum overstates it when lanes overlap
        total = walls[-1] if walls else sum(seconds for _, _, seconds, _ in rows)
        cpus = [cpu for *_, cpu in rows if cpu is not None]
        lines.append(f"{'total':<{width}}  {'':>3}  {_minutes(total):>9}  {_minutes(sum(cpus)):>9}")
    found = skips(reports)
    lines.append(f"skipped tests: {sum(found.values())}")
    lines.extend(f"  {count} x {reason}" for reason, count in sorted(found.items()))
    return "\n".join(lines)


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.test_report", description=__doc__)
    parser.add_argument("reports", nargs="?", type=Path, default=REPORTS)
    print(render(parser.parse_args(argv).reports))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
