"""The bench's command line: sizes like 2G, the filesystems and the other disks to build."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.disk import EXTRA_DISKS, FILESYSTEMS, MIB
from bench.methods import METHODS

DESCRIPTION = "`make bench`: build each disk, copy it with every method, measure, compare, draw."

SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


MIN_SIZE = 256 * MIB  # small sizes are for developing the bench (mkfs.xfs needs 300 MiB)


def parse_size(text: str, minimum: int = MIN_SIZE) -> int:
    """'2G' -> 2147483648 (binary units); at least `minimum` (256 MiB), in whole MiB."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = SUFFIXES.get(text[-1:], 1) if text else 1
    number = text[:-1] if text[-1:] in SUFFIXES else text
    try:
        size = int(float(number) * factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a number like 2G") from None
    if size < minimum or size % MIB:
        raise argparse.ArgumentTypeError(
            f"size {text!r} must be at least {minimum // MIB}M and whole MiB"
        )
    return size


def _names(text: str, choices: tuple[str, ...], what: str, also: str = "") -> list[str]:
    """A comma list of names, each one of `choices`."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what}(s) {unknown}; choose from {','.join(choices)}{also}"
        )
    return names


def parse_filesystems(text: str) -> list[str]:
    return _names(text, FILESYSTEMS, "filesystem")


def parse_disks(text: str) -> list[str]:
    """The disks besides the dirty one per filesystem: a comma list, or "none"."""
    if text.strip() == "none":
        return []
    return _names(text, EXTRA_DISKS, "disk", " or none")


def parse_methods(text: str) -> list[str]:
    return _names(text, tuple(m.name for m in METHODS), "method")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=DESCRIPTION)
    parser.add_argument(
        "--size",
        type=parse_size,
        default=parse_size("2G"),
        help="volume size per filesystem (default 2G)",
    )
    parser.add_argument(
        "--fs",
        type=parse_filesystems,
        default=list(FILESYSTEMS),
        help="comma list of filesystems (default ext4,xfs,ntfs)",
    )
    parser.add_argument(
        "--disks",
        type=parse_disks,
        default=list(EXTRA_DISKS),
        help=f"comma list of the other disks, or none (default {','.join(EXTRA_DISKS)})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="--jobs for sparsecopy (default: the program's own default)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        choices=range(1, 10),
        default=1,
        metavar="N",
        help="run each method N times; seconds is the median (default 1)",
    )
    parser.add_argument(
        "--source-mbps",
        type=int,
        default=0,
        help="cap reads of the source device at N MiB/s (default: no cap)",
    )
    parser.add_argument(
        "--source-iops",
        type=int,
        default=0,
        help="cap read requests to the source device at N per second (default: no cap)",
    )
    parser.add_argument(
        "--methods",
        type=parse_methods,
        default=None,
        help="comma list of the methods to run where they apply (default: all); the targets "
        "that need a method left out are missed as not measured",
    )
    parser.add_argument("--out", type=Path, default=Path("out/bench"))
    return parser.parse_args(argv)
