"""Run the fetched data-plane program with its disk planning replayed (diskless twin, replay.py).

usage (by the diverting python3 of replay.py): replay_program.py SPARSECOPY.pyz job ARGS...

The program is imported from the zipapp the Command document fetched and checked, then run with
its own command line. Three of its functions are replaced, nothing else:
- device._is_block: a volume's "device" is its backing file here (the by-id links point at the
  volumes' files); a missing link fails exactly as on an instance;
- plan_disk (as disk_copy and snapshot_copy call it): the recorded table and partitions of the
  volume (TWIN_REPLAY_PLAN, by the file's real path), each partition's extents being the blocks
  the recorded copy took within it; with a block list the plan is cut to it as plan_disk does;
- fsck_all (target volume, verify): each partition's recorded fsck result (and the plan the
  recorded source check: its `consistent`).
Stdlib only: it runs under the python3 the instance's script would use.
"""

import json
import os
import sys
import types
from typing import Any


def _import_program(pyz: str) -> None:
    """The zipapp's modules as the `sparsecopy` package, as its own __main__ does."""
    package = types.ModuleType("sparsecopy")
    package.__path__ = [pyz]
    sys.modules["sparsecopy"] = package


def _replayed_plan(plans: "dict[str, Any]") -> Any:
    from sparsecopy import plan as planning
    from sparsecopy.errors import Failure
    from sparsecopy.extents import complement, intersect, normalize
    from sparsecopy.partitions import Layout, Partition
    from sparsecopy.progress import log
    from sparsecopy.shared import EBS_BLOCK_BYTES as BLOCK

    def plan_disk(source: str, disk_size: int, sector: int, method: str, recover: bool,
                  reader: Any, held: Any = None, scratch: Any = None) -> Any:  # fmt: skip
        recorded = plans.get(os.path.realpath(source))
        if recorded is None:
            raise Failure(f"twin diskless: no recorded plan for {source}: not a diskless source")
        taken = normalize(
            (first * BLOCK, min(count * BLOCK, disk_size - first * BLOCK))
            for first, count in recorded["new_blocks"]
        )
        parts = [Partition(p["number"], p["start"], p["size"], "") for p in recorded["partitions"]]
        plans_: list[Any] = []
        for part, summary in zip(parts, recorded["partitions"], strict=True):
            plan = planning.PartPlan(part, summary["fs"])
            plan.use(summary["method"], intersect(taken, [(part.start, part.size)]),
                     summary.get("note", ""))  # fmt: skip
            plan.twin_fsck = summary.get("fsck", "")
            plan.consistent = summary.get("consistent")  # what the source's checker said
            if held is not None:
                planning._limit(plan, held)
            plans_.append(plan)
            log(f"partition {plan.number}: {plan.fs}, method {plan.method} (twin: replayed plan)")
        outside = intersect(complement([(p.start, p.size) for p in parts], 0, disk_size), taken)
        if held is not None:
            outside = held.clip(outside)
        return planning.DiskPlan(Layout(recorded["table"], parts, ""), plans_, outside)

    return plan_disk


def _replayed_fsck(source: str, target: str, disk_size: int, plans: "list[Any]") -> None:
    for plan in plans:
        plan.fsck = getattr(plan, "twin_fsck", "")


def main(argv: "list[str]") -> int:
    pyz, args = argv[0], argv[1:]
    _import_program(pyz)
    with open(os.environ["TWIN_REPLAY_PLAN"]) as f:
        plans = json.load(f)
    from sparsecopy import cli, device, disk_copy, snapshot_copy

    is_block = device._is_block
    device._is_block = lambda path: os.path.isfile(path) or is_block(path)
    replayed = _replayed_plan(plans)
    disk_copy.plan_disk = replayed
    snapshot_copy.plan_disk = replayed
    disk_copy.fsck_all = _replayed_fsck
    code: int = cli.main(args)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
