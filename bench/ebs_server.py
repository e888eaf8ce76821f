"""The EBS direct-API stand-in (devkit/ebs/standin.py) in a process of its own, for the
direct-write benchmark: in the client's process it would share the client's interpreter lock
(1000 blocks at 100 ms x 100 jobs gave 181 MB/s there, CPU-bound on 2 CPUs).

    python -m bench.ebs_server --latency 0.1 --max-concurrency 100

prints one JSON line {"url", "pid"} and then answers commands on stdin, one JSON line each on
stdout: `stats` (requests, puts in flight, CPU seconds, every snapshot's blocks as SHA-256 hex),
`start GIB` (StartSnapshot, as the workflow's Lambda does before the job), `reset` (forget
snapshots and counters); end of stdin stops it. StandInProcess is the parent's side. Only each
block's digest is kept (--keep-blocks keeps the data too, for GetSnapshotBlock), so a 10 GiB run
needs no 10 GiB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from devkit.ebs.standin import StandIn

ROOT = Path(__file__).resolve().parent.parent


class MeasuredStandIn(StandIn):
    """The stand-in, also recording when each put was in flight (from its arrival until its
    answer, the latency sleep included). Blocks are kept as digests only (the emulator keeps
    each put's digest for CompleteSnapshot's aggregated checksum anyway), unless keep_blocks."""

    def __init__(self, keep_blocks: bool = False, **kwargs: Any) -> None:
        super().__init__(keep_data=keep_blocks, **kwargs)
        self.put_spans: list[tuple[float, float]] = []
        # ThreadingHTTPServer listens with a backlog of 5; a hundred clients connecting at once
        # would wait for SYN retries. listen() again on Linux raises the backlog.
        self.server.socket.listen(max(self.quirks.max_in_flight * 2, 5))

    def served(self, method: str, started: float, ended: float) -> None:
        if method == "PUT":  # PutSnapshotBlock
            with self.store.lock:
                self.put_spans.append((started, ended))

    def reset(self) -> None:
        with self.store.lock:
            super().reset()
            self.put_spans.clear()

    def report(self) -> dict[str, Any]:
        """Counters, put timing and every snapshot's blocks (index -> SHA-256 hex)."""
        self.emulator.settle()
        with self.store.lock:
            spans = list(self.put_spans)
            writes = self.writes
            snapshots = {
                sid: {
                    "status": snap.status,
                    "volume_size": snap.size_gib,
                    "blocks": _hex(writes.snapshots[sid].digests),
                }
                for sid, snap in self.snapshots.items()
            }
        first = min((s for s, _ in spans), default=0.0)
        last = max((e for _, e in spans), default=0.0)
        window = last - first
        busy = sum(e - s for s, e in spans)
        return {
            "requests": dict(writes.requests),
            "max_in_flight": writes.max_in_flight,
            "rejected": writes.concurrent_limit_served,
            "throttled": writes.puts_throttled,
            "puts": len(spans),
            "put_seconds": round(window, 3),
            "mean_puts_in_flight": round(busy / window, 1) if window > 0 else 0.0,
            "cpu_seconds": round(time.process_time(), 2),
            "snapshots": snapshots,
        }


def _hex(digests: dict[int, bytes]) -> dict[str, str]:
    return {str(index): digest.hex() for index, digest in sorted(digests.items())}


def serve(server: MeasuredStandIn, commands: IO[str], answers: IO[str]) -> None:
    """Answer commands until the parent closes stdin."""
    with server:
        answers.write(json.dumps({"url": server.url, "pid": os.getpid()}) + "\n")
        answers.flush()
        for line in commands:
            command = line.strip()
            if command == "stats":
                answer: dict[str, Any] = server.report()
            elif command.startswith("start "):  # what the Lambda's StartSnapshot would do
                answer = server.start_snapshot(int(command.split()[1]), Timeout=60)
            elif command == "reset":
                server.reset()
                answer = {"reset": True}
            else:
                answer = {"error": f"unknown command {command!r}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ebs_server", description=__doc__)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each request takes")
    parser.add_argument("--max-concurrency", type=int, default=100, help="requests in flight")
    parser.add_argument("--seal-seconds", type=float, default=0.0)
    parser.add_argument("--keep-blocks", action="store_true", help="keep the data (read calls)")
    args = parser.parse_args(argv)
    server = MeasuredStandIn(
        keep_blocks=args.keep_blocks,
        latency=args.latency,
        max_concurrency=args.max_concurrency,
        seal_seconds=args.seal_seconds,
    )
    serve(server, sys.stdin, sys.stdout)
    return 0


class StandInProcess:
    """The parent's side: start `python -m bench.ebs_server`, ask it for stats, stop it."""

    def __init__(self, latency: float, max_concurrency: int, timeout: float = 30.0) -> None:
        self.latency, self.max_concurrency, self.timeout = latency, max_concurrency, timeout
        cmd = [
            sys.executable,
            "-m",
            "bench.ebs_server",
            "--latency",
            str(latency),
            "--max-concurrency",
            str(max_concurrency),
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        hello = self._answer()
        self.url: str = hello["url"]
        self.pid: int = hello["pid"]

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError(f"the stand-in process exited {self.proc.returncode}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def stats(self) -> dict[str, Any]:
        return self.ask("stats")

    def start_snapshot(self, size_gib: int) -> str:
        return str(self.ask(f"start {size_gib}")["SnapshotId"])

    def close(self) -> None:
        """End of stdin stops it; it is killed (by its own pid) if it does not go."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> StandInProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
