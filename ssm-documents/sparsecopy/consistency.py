"""A filesystem's own checker, run read-only, as the judge of whether its free-space map can be
trusted (issue #23; docs/data-plane.md, "What the program trusts").

A map is only as good as the filesystem around it: bit rot, a kernel bug or a crash with bad luck
can leave a bitmap that calls free a block an inode, a directory or the group metadata still
uses, while the superblock still says "clean". The checker (``e2fsck -fn``, ``xfs_repair -n``)
walks every structure the filesystem can reach and compares it with the map; where it finds
anything, the partition is copied raw and the summary says the source is inconsistent."""

import re
from typing import Optional

from .blockdev import run_bounded

# A checker is stopped after this long or this much output (e2fsck -n loops on some corrupt
# filesystems, printing the same problems again and again, e2fsprogs' f_illitable_flexbg): the
# source then counts as inconsistent. The time is far above what a check of a 16 TiB volume takes.
CHECK_SECONDS = 6 * 3600
CHECK_OUTPUT = 4 * 1024 * 1024
# Lines of a checker's output that are not findings: banners, pass and phase headers, progress,
# statistics.
_NOT_FINDINGS = re.compile(
    r"^(e2fsck \d|Pass \d|Phase \d|\S+: \d+/\d+ files|No modify flag set|- |"
    r"\*\*\*\*\* FILE SYSTEM WAS MODIFIED|\S+: \*+ WARNING: Filesystem still has errors)"
)
# e2fsck is not deterministic on some damaged filesystems: uninitialised values ("i_blocks is 2,
# should be 1707046078773890") and the addresses in the backtrace of its own crash differ from run
# to run, so verify would take a faithful copy's findings for new ones (e2fsprogs' f_ea_checks,
# f_h_badroot): such numbers are compared as N
_UNSTABLE = re.compile(r"\b0x[0-9a-f]{9,}\b|\b\d{13,}\b")
_PROMPT = re.compile(r"(^|\s)[A-Z][\w' ]*\? no$")
CHECKERS = {
    "ext4": ["e2fsck", "-f", "-n"],
    "xfs": ["xfs_repair", "-n"],
    "vfat": ["fsck.fat", "-n"],
    "btrfs": ["btrfs", "check", "--readonly"],
    "ntfs": ["ntfsfix", "--no-action"],
}


def findings(output: str, device: str) -> "list[str]":
    """The problems a checker printed, in order, each once, the device's name taken out."""
    seen: list[str] = []
    for line in output.replace(device, "DEVICE").splitlines():
        # "Fix? no", "Clear? no": -n's answers to its own prompts, on the line or the next one
        line = _PROMPT.sub("", _UNSTABLE.sub("N", re.sub(r"\s+", " ", line))).strip()
        if line and not _NOT_FINDINGS.search(line) and line not in seen:
            seen.append(line)
    return seen


def check(fs: str, device: str) -> "Optional[list[str]]":
    """Run ``fs``'s checker read-only on ``device``: None when it finds nothing, else what it
    found (at least one line)."""
    args = [*CHECKERS[fs], device]
    code, output = run_bounded(args, CHECK_SECONDS, CHECK_OUTPUT)
    if code == 0:
        return None
    found = findings(output, device)
    if code is None:
        limits = f"over {CHECK_SECONDS} s or {CHECK_OUTPUT} bytes of output"
        return [f"{args[0]} was stopped ({limits})", *found]
    return found or [f"{args[0]} exit code {code}"]


def describe(found: "list[str]", limit: int = 3) -> str:
    """The first findings, for a note or an error: "a; b; c (and N more)"."""
    more = f" (and {len(found) - limit} more)" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more
