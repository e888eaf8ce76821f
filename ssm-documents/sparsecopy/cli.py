"""Command line: ``copy``, ``inspect``, ``device``, ``job`` (the Command document's run; with
``--target snapshot`` it copies into started EBS snapshots) and
``put-snapshot`` (an image into a new snapshot through the EBS direct APIs).
Stdout carries only results."""

import argparse
import json
import os
import sys
import traceback
from typing import Optional

from . import job
from .device import find_device
from .disk_copy import DEFAULT_JOBS, DEFAULT_SCRATCH, CopyOptions, copy_disk, inspect_disk
from .errors import Failure
from .plan import ALLOCATED, METHODS
from .progress import log
from .put_snapshot import PutOptions, put_snapshot
from .shared import JOBS_MAX, JOBS_MIN

JOBS_HELP = f"reads in flight ({JOBS_MIN}-{JOBS_MAX})"
BLOCKS_HELP = (
    "JSON (optionally gzipped) list of the 512 KiB blocks the source's snapshot holds "
    "(ListSnapshotBlocks: BlockSize, VolumeSize, Blocks and/or BlockRanges): "
    "nothing outside them is read or written"
)


def _add_copy(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    copy = sub.add_parser("copy", help="copy SOURCE to the blank TARGET of the same size")
    copy.add_argument("source")
    copy.add_argument("target")
    copy.add_argument("--method", choices=METHODS, default=ALLOCATED)
    copy.add_argument("--scratch", default=DEFAULT_SCRATCH, help="directory for trim images")
    copy.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=JOBS_HELP)
    copy.add_argument("--verify", action="store_true", help="re-read and fsck the target")
    copy.add_argument("--source-blocks", metavar="FILE", help=BLOCKS_HELP)


def _add_job(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = sub.add_parser(
        "job",
        help="the Command document's run: find and copy every volume, print one JSON line",
    )
    for name in ("source-volume-ids", "target-volume-ids"):
        run.add_argument(f"--{name}", required=True, help="comma list, job order")
    for name in ("source-device-names", "target-device-names"):
        run.add_argument(f"--{name}", required=True, help="comma list of /dev/sdX (Xen)")
    run.add_argument(
        "--target",
        choices=(job.VOLUME, job.SNAPSHOT),
        default=job.VOLUME,
        help="volume: onto the target volumes; snapshot: into the started snapshots "
        "(EBS direct APIs; the target volume and device lists are empty)",
    )
    run.add_argument(
        "--target-snapshot-ids",
        default="",
        metavar="IDS",
        help="--target snapshot: comma list of the started snapshots, job order",
    )
    run.add_argument("--method", choices=METHODS, default=ALLOCATED)
    run.add_argument("--jobs", type=int, default=DEFAULT_JOBS, help=JOBS_HELP)
    run.add_argument("--verify", choices=("true", "false"), default="true")
    run.add_argument(
        "--source-blocks-url",
        default="",
        metavar="URL",
        help="presigned GET of the gzip tar of volume-<i>.json block lists (empty: none)",
    )
    run.add_argument("--scratch", default=DEFAULT_SCRATCH, help="directory for trim images")
    run.add_argument("--mode", choices=("copy", "inspect"), default="copy")


def _tag(text: str) -> "tuple[str, str]":
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"tag {text!r} is not KEY=VALUE")
    return key, value


def _add_put_snapshot(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    put = sub.add_parser(
        "put-snapshot",
        help="write the non-zero 512 KiB blocks of IMAGE as a new snapshot (EBS direct APIs)",
    )
    put.add_argument("image", help="image file (sparse) or block device")
    put.add_argument("--size-gib", type=int, required=True, help="the snapshot's VolumeSize")
    put.add_argument("--kms-key-arn", help="encrypt with this key (implies --encrypted)")
    put.add_argument("--encrypted", action="store_true", help="encrypt (default EBS key)")
    put.add_argument("--tag", type=_tag, action="append", default=[], metavar="K=V")
    put.add_argument("--description")
    put.add_argument("--client-token", help="StartSnapshot's idempotency token (default: random)")
    put.add_argument("--jobs", type=int, default=32, help="puts in flight = connections (1-128)")
    put.add_argument("--timeout-minutes", type=int, default=60, help="StartSnapshot's Timeout")
    put.add_argument("--verify", action="store_true", help="read every block back afterwards")


def _put_snapshot(args: argparse.Namespace) -> "dict[str, object]":
    return put_snapshot(
        PutOptions(
            args.image,
            args.size_gib,
            args.kms_key_arn,
            args.encrypted,
            tuple(args.tag),
            args.description,
            args.client_token,
            args.jobs,
            args.timeout_minutes,
            args.verify,
        )
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparsecopy", description="Copy only the live data of a block device."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_copy(sub)
    inspect = sub.add_parser("inspect", help="print the plan for SOURCE without writing")
    inspect.add_argument("source")
    inspect.add_argument("--source-blocks", metavar="FILE", help=BLOCKS_HELP)
    device = sub.add_parser("device", help="print the block device of an attached EBS volume")
    device.add_argument("volume_id")
    device.add_argument("--device-name", help="the /dev/sdX name given at attachment (Xen)")
    _add_job(sub)
    _add_put_snapshot(sub)
    return parser


def _copy(args: argparse.Namespace) -> "dict[str, object]":
    return copy_disk(
        CopyOptions(
            args.source,
            args.target,
            args.method,
            args.scratch,
            args.jobs,
            args.verify,
            args.source_blocks,
        )
    )


def _inspect(args: argparse.Namespace) -> "dict[str, object]":
    return inspect_disk(args.source, args.source_blocks)


def _job(args: argparse.Namespace) -> int:
    return job.main(
        job.JobOptions(
            args.source_volume_ids,
            args.target_volume_ids,
            args.source_device_names,
            args.target_device_names,
            args.method,
            args.jobs,
            args.verify == "true",
            args.source_blocks_url,
            args.scratch,
            args.mode,
            args.target,
            args.target_snapshot_ids,
        )
    )


def main(argv: Optional["list[str]"] = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "job":
        return _job(args)  # prints its one line, the error line too
    try:
        if args.command == "device":
            print(find_device(args.volume_id, args.device_name), flush=True)
            return 0
        if args.command == "put-snapshot":
            result = _put_snapshot(args)
        else:
            result = _copy(args) if args.command == "copy" else _inspect(args)
    except Failure as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("error: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("SPARSECOPY_DEBUG"):
            traceback.print_exc()
        log(f"error: internal error: {type(exc).__name__}: {exc}")
        return 3
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
