"""Starts the runner's Lambda workers (lambda_worker.py) by forking one warm process.

A worker started from scratch spends about 1.5 CPU-seconds before it serves anything: importing
boto3 and Powertools and parsing the botocore service models (EC2's is megabytes of JSON) for its
clients. Every execution starts one worker per function it calls, so the twin's tests spent most
of their CPU there, and on a busy machine the wall time of each start grew to tens of seconds.

This process imports those libraries and loads those models once, then forks a worker per
request: the fork shares all of it, copy-on-write. Nothing of a function is imported here (its
code and environment are the request's), and the workers' botocore sessions share the one data
loader made here (shared_loader.py), so no model is parsed twice. The workers' bytecode goes to
this zygote's own directory (PYCACHE beside its socket): a function's modules are compiled by the
first worker that imports them, not by every one (with PYTHONDONTWRITEBYTECODE, as the twin's
environment may set, each worker compiled them all again: about 0.03 CPU-seconds a worker), and
nothing is written into the function's code directory.

Protocol: lambda_spawn.py (what run.mjs starts in place of a worker) connects to the Unix socket,
sends its stdin, stdout and stderr (SCM_RIGHTS) with a JSON line {"argv", "env", "cwd"}; the
forked child makes them its own and runs lambda_worker.main(); when it ends it writes its exit
code on the connection, which lambda_spawn.py exits with.

usage: python lambda_zygote.py SOCKET_PATH  (twin/zygote.py starts it; it ends with its parent)
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

# the workers' bytecode cache: this directory beside the zygote's socket
PYCACHE = "pycache"
# every service a task Lambda makes a client of (lambdas/compactor/aws.py), loaded once here
SERVICES = ("ec2", "ssm", "kms", "events", "ebs", "s3", "stepfunctions", "sts", "logs")


def _warm() -> None:
    import aws_lambda_powertools
    import aws_lambda_powertools.logging
    import aws_lambda_powertools.metrics
    import aws_lambda_powertools.tracing
    import aws_lambda_powertools.utilities.typing  # noqa: F401
    import aws_xray_sdk.core  # noqa: F401 - every Tracer() imports it, even with tracing off
    import boto3
    from shared_loader import share_one_loader

    share_one_loader()
    session = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="warm", aws_secret_access_key="warm"
    )
    for service in SERVICES:
        session.client(service)  # type: ignore[call-overload]
    boto3.DEFAULT_SESSION = None  # each worker makes its own, from its own environment


def _child(conn: socket.socket, fds: list[int], request: dict[str, Any], pycache: str) -> None:
    """In the forked process: become the worker the request describes; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the worker's subprocesses must be waited
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the worker reads it to its end
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        for entry in reversed(request["env"].get("PYTHONPATH", "").split(os.pathsep)):
            if entry:
                sys.path.insert(0, entry)
        sys.argv = request["argv"]
        sys.pycache_prefix, sys.dont_write_bytecode = pycache, False
        sys.path.insert(0, str(Path(__file__).parent))
        import lambda_worker

        lambda_worker.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            conn.sendall(f"{code}\n".encode())
        finally:
            os._exit(code)


def serve(path: str) -> None:
    _warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    events = selectors.DefaultSelector()
    events.register(server, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)  # closed when the twin's process ends
    print("ready", flush=True)
    while True:
        for key, _ in events.select():
            if key.fileobj is sys.stdin:
                if not os.read(0, 1 << 16):
                    return
            else:
                _accept(server, str(Path(path).parent / PYCACHE))


def _accept(server: socket.socket, pycache: str) -> None:
    conn, _ = server.accept()
    with conn:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                break
            data += more
        if len(fds) == 3 and os.fork() == 0:
            server.close()
            _child(conn, fds, json.loads(data), pycache)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(sys.argv[1])
