"""Check each target filesystem with its own checker in no-change mode."""

import shutil

from .blockdev import partition_device, run
from .errors import Failure
from .plan import RAW, PartPlan
from .progress import log

CHECKERS = {
    "ext4": ["e2fsck", "-f", "-n"],
    "xfs": ["xfs_repair", "-n"],
    "vfat": ["fsck.fat", "-n"],
    "btrfs": ["btrfs", "check", "--readonly"],
    "ntfs": ["ntfsfix", "--no-action"],
}


def fsck_partition(target: str, disk_size: int, plan: PartPlan) -> str:
    """ "clean", or why no check ran; Failure when the checker finds a problem."""
    checker = CHECKERS.get(plan.fs)
    if checker is None:
        return f"not checked: {plan.fs} is not a filesystem with a checker"
    if plan.method == RAW and plan.note:
        # Copied byte for byte because the map was not trustworthy (pending log, not clean,
        # unreadable): the checker would report exactly that, not a copying problem.
        return "not checked: copied raw because its own map could not be trusted (see note)"
    if shutil.which(checker[0]) is None:
        return f"not checked: {checker[0]} is not installed"
    log(f"verify: {checker[0]} on target partition {plan.number} ({plan.fs})")
    with partition_device(target, plan.start, plan.size, disk_size, read_only=True) as device:
        proc = run([*checker, device], check=False)
    if proc.returncode != 0:
        lines = (proc.stdout.strip() + "\n" + proc.stderr.strip()).strip().splitlines()
        raise Failure(
            f"verify: {checker[0]} reports problems on target partition {plan.number} "
            f"({plan.fs}): {lines[-1] if lines else 'exit code ' + str(proc.returncode)}"
        )
    return "clean"


def fsck_all(target: str, disk_size: int, plans: list[PartPlan]) -> None:
    for plan in plans:
        plan.fsck = fsck_partition(target, disk_size, plan)
