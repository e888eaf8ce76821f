"""The EBS emulator (devkit/ebs/api.py) on a local HTTP server of its own, blocks in memory: the
stand-in for the EBS direct APIs of sparsecopy's tests and the benchmark.

    with StandIn(latency=0.1, max_concurrency=100) as ebs:
        os.environ["AWS_ENDPOINT_URL_EBS"] = ebs.url

Every request sleeps ``latency`` seconds while it counts as in flight; above ``max_concurrency``
requests in flight the answer is ConcurrentLimitExceededException. ``seal_seconds``: how long a
completed snapshot seals. With ``credentials`` every request's SigV4 signature is checked.
More of AWS's behaviours and faults: ``ebs.quirks`` (devkit/ebs/quirks.py); what was served:
``ebs.writes``; the snapshots and their blocks: ``ebs.snapshot(id)``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from . import writing
from .api import Emulator
from .quirks import DirectWrites, Quirks
from .store import MemorySnapshot, MemoryStore
from .wire import Dropped, EbsError, Request, Response, error_response


class StandIn:
    """The server (a ThreadingHTTPServer in a daemon thread) around one Emulator."""

    def __init__(
        self,
        latency: float = 0.0,
        max_concurrency: int = 1000,
        seal_seconds: float = 0.0,
        credentials: tuple[str, str] | None = None,
        region: str = "us-east-1",
        keep_data: bool = True,
    ) -> None:
        self.store = MemoryStore(keep_data=keep_data)
        self.quirks = Quirks(
            max_in_flight=max_concurrency, latency=latency, seal_seconds=seal_seconds
        )
        self.emulator = Emulator(self.store, self.quirks, region=region, credentials=credentials)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def writes(self) -> DirectWrites:
        return self.emulator.writes

    @property
    def snapshots(self) -> dict[str, MemorySnapshot]:
        return self.store.snapshots

    def snapshot(self, snapshot_id: str) -> MemorySnapshot:
        """A snapshot as it is now (a seal that has run its time has ended)."""
        self.emulator.settle()
        return self.store.snapshots[snapshot_id]

    def is_open(self, snapshot_id: str) -> bool:
        """Pending and not completed: puts are still taken."""
        direct = self.writes.snapshots[snapshot_id]
        return self.snapshot(snapshot_id).status == "pending" and not direct.sealed

    def start_snapshot(self, size_gib: int, **spec: Any) -> dict[str, Any]:
        """StartSnapshot as the workflow's Lambda calls it before the job, in this process (its
        signature is not the instance's to check)."""
        body = json.dumps({"VolumeSize": size_gib, **spec}).encode()
        request = Request("POST", "/snapshots", "", {"content-type": "application/json"}, body)
        status, _, answer = writing.start(self.emulator, request)
        doc: dict[str, Any] = json.loads(answer)
        if status != 201:
            raise RuntimeError(f"StartSnapshot answered {status}: {doc}")
        return doc

    def reset(self) -> None:
        """Forget every snapshot and counter."""
        with self.store.lock:
            self.store.snapshots.clear()
            self.emulator.writes = DirectWrites()

    def served(self, method: str, started: float, ended: float) -> None:
        """Called after each request (the bench records the puts' spans)."""

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(stand_in: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = Request(self.command, parts.path, parts.query, headers, body)
            started = time.monotonic()
            try:
                answer = stand_in.emulator.handle(request)
            except Dropped:
                self.close_connection = True  # no answer at all
                return
            finally:
                stand_in.served(self.command, started, time.monotonic())
            status, reply, data = answer or _unknown(self.command, parts.path)
            self.send_response(status)
            for name, value in reply:
                self.send_header(name, value)
            if not any(name.lower() == "content-type" for name, _ in reply):
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = _serve

    return Handler


def _unknown(method: str, path: str) -> Response:
    return error_response(EbsError(404, "UnknownOperationException", None, f"{method} {path}"))
