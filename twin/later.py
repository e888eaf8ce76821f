"""Time passes after a run: what the stack does hours later, without waiting hours.

A direct snapshot that EC2 refused to delete while `pending` (teardown's `leftToTimeOut`) turns
`error` directSnapshotTimeoutMinutes after its last write, and the scheduled sweeper then deletes
it. sweep_later() moves the emulator's EBS direct clock (devkit/ebs/wire.clock) that far
on and runs the deployed sweep function's code (its synthesized asset, its environment, its
identity: every request carries its X-Twin-Caller, so the IAM check judges it by the sweep role)
with its own clock as far on, as its schedule would run it then.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devkit.ebs import wire

from .cfn import Deployment, Function
from .emulator.server import Emulator
from .iam.recorder import CALLER_HEADER
from .limits import limit

SWEEP_HANDLER = "compactor.handlers.sweep.handler"


def minutes_until_swept(function: Function) -> int:
    """How long after a run the sweeper has deleted a direct snapshot left to time out: its
    Timeout, then the sweeper's grace period after the execution ended, and a minute."""
    grace = int(function.env.get("SWEEP_GRACE_MINUTES") or limit("sweepGraceMinutesMin"))
    return max(limit("directSnapshotTimeoutMinutes"), grace) + 1


def sweep_function(d: Deployment) -> Function:
    (function,) = [f for f in d.functions.values() if f.handler == SWEEP_HANDLER]
    return function


@contextmanager
def as_the_function(emu: Emulator, function: Function) -> Iterator[Any]:
    """The function's code, environment and identity in this process (restored after)."""
    saved_env, saved_path = dict(os.environ), list(sys.path)
    os.environ.update({**function.env, **emu.client_env()})
    sys.path.insert(0, str(function.code_dir))
    from compactor import aws

    aws.reset_clients()

    def as_the_function(request: Any, **_: Any) -> None:
        request.headers[CALLER_HEADER] = function.name

    for client in (aws.ec2(), aws.sfn(), aws.s3(), aws.events()):
        client.meta.events.register("request-created", as_the_function)
    try:
        yield aws
    finally:
        aws.reset_clients()
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path


@contextmanager
def _logs_to(path: Path | None) -> Iterator[None]:
    """The function's log lines (Powertools writes them to stdout) go to `path` meanwhile."""
    from compactor.observability import SERVICE

    handlers = [
        h for h in logging.getLogger(SERVICE).handlers if isinstance(h, logging.StreamHandler)
    ]
    if path is None or not handlers:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        before = [h.setStream(out) for h in handlers]
        try:
            yield
        finally:
            for handler, stream in zip(handlers, before, strict=True):
                handler.setStream(stream)


def sweep_later(
    emu: Emulator, d: Deployment, minutes: int, runs: int = 4, log: Path | None = None
) -> list[dict[str, Any]]:
    """The sweeper's runs `minutes` after now (until nothing is left to remove, at most `runs`),
    with the EBS direct clock as far on; returns each run's result. Its log lines go to `log`."""
    function = sweep_function(d)
    real = wire.clock
    wire.clock = lambda: real() + minutes * 60
    results: list[dict[str, Any]] = []
    try:
        with as_the_function(emu, function), _logs_to(log):
            from compactor import sweeper

            config = sweeper.SweepConfig.from_env(os.environ)
            for _ in range(runs):
                result = sweeper.sweep(config, datetime.now(UTC) + timedelta(minutes=minutes))
                results.append(dict(result))
                if not result["remaining"]:
                    break
    finally:
        wire.clock = real
    return results
