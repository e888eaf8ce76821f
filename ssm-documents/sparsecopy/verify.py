"""Check each target filesystem with its own checker in no-change mode, against the source.

A faithful copy of an inconsistent source is as inconsistent as the source: the copy must be no
worse, not clean. So where the checker finds something on the target, it is also run on the
source partition (read-only; the plan's own run of that checker is reused), and the copy fails
verification only for what the checker finds on the target and not on the source."""

import shutil
from typing import Optional

from .blockdev import partition_device
from .consistency import CHECKERS, check, describe
from .errors import Failure
from .plan import PartPlan
from .progress import log


def _check_partition(disk: str, disk_size: int, plan: PartPlan) -> Optional[list[str]]:
    with partition_device(disk, plan.start, plan.size, disk_size, read_only=True) as device:
        return check(plan.fs, device)


def fsck_partition(source: str, target: str, disk_size: int, plan: PartPlan) -> str:
    """ "clean", "as the source: ...", or why no check ran; Failure when the checker finds on
    the target a problem it does not find on the source."""
    checker = CHECKERS.get(plan.fs)
    if checker is None:
        return f"not checked: {plan.fs} is not a filesystem with a checker"
    if shutil.which(checker[0]) is None:
        return f"not checked: {checker[0]} is not installed"
    log(f"verify: {checker[0]} on target partition {plan.number} ({plan.fs})")
    found = _check_partition(target, disk_size, plan)
    if found is None:
        return "clean"
    if plan.judge == checker[0]:
        at_source = plan.findings  # the plan ran this checker on the source
    else:
        log(f"verify: {checker[0]} on source partition {plan.number}, to compare")
        at_source = _check_partition(source, disk_size, plan) or []
    worse = [line for line in found if line not in at_source]
    if worse:
        raise Failure(
            f"verify: {checker[0]} finds on target partition {plan.number} ({plan.fs}) what it "
            f"does not find on the source: {describe(worse)}"
        )
    return (
        f"as the source: {checker[0]} finds the same {len(found)} problem(s) on both, the "
        f"first: {found[0]}; check and repair the source filesystem (fsck)"
    )


def fsck_all(source: str, target: str, disk_size: int, plans: list[PartPlan]) -> None:
    for plan in plans:
        plan.fsck = fsck_partition(source, target, disk_size, plan)
