"""FAULT=ebs-account-quota: another run in the same account puts blocks at the same time.

PutSnapshotBlock's quota is per account: every instance of every run shares it (issue #21). With
the fault the emulator's account quota is low (faults.ACCOUNT_PUTS_PER_SECOND) and, while the
execution runs, a second data plane (`sparsecopy put-snapshot` of a dirty image, as another
run's transfer instance would put its blocks) writes its own direct snapshot against the same
emulator. Both must complete: the execution is judged as every run is, the second run must end
completed with every block verified. Its snapshot is not the execution's: it is deleted and left
out of the run's counts once it ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .emulator.blockstore import EBS_BLOCK
from .emulator.server import Emulator
from .options import REPO

GIB = 1024**3
# every other 512 KiB block of the first 120 MiB: 120 puts, several seconds at the fault's quota
BLOCKS = range(0, 240, 2)
# how long the second run waits for the execution's first StartSnapshot before it starts anyway
WAIT_FOR_THE_EXECUTION_SECONDS = 600


class SecondRun:
    """A put-snapshot process started now; finish() waits for it and checks it."""

    def __init__(self, emu: Emulator, work: Path) -> None:
        self.emu = emu
        self.image = work / "second-run.img"
        with open(self.image, "wb") as f:
            f.truncate(GIB)
            for index in BLOCKS:
                f.seek(index * EBS_BLOCK)
                f.write((f"second run block {index} ".encode() * EBS_BLOCK)[:EBS_BLOCK])
        self.result: subprocess.CompletedProcess[str] | None = None
        self.thread = threading.Thread(target=self._run, name="second-run", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # at once: from the execution's first StartSnapshot (its copy follows), not before
        deadline = time.monotonic() + WAIT_FOR_THE_EXECUTION_SECONDS
        while not self.emu.state.direct.started and time.monotonic() < deadline:
            time.sleep(0.2)
        env = {**os.environ, **self.emu.client_env(), "AWS_ENDPOINT_URL_EBS": self.emu.endpoint}
        self.result = subprocess.run(
            [sys.executable, str(REPO / "ssm-documents" / "sparsecopy"), "put-snapshot",
             str(self.image), "--size-gib", "1", "--jobs", "32", "--verify"],
            capture_output=True, text=True, env=env, timeout=1800, check=False,
        )  # fmt: skip

    def finish(self) -> dict[str, Any]:
        """The second run's summary; RuntimeError (the case fails) unless it completed whole."""
        self.thread.join()
        self.image.unlink(missing_ok=True)
        run = self.result
        if run is None or run.returncode != 0:
            stderr = run.stderr[-2000:] if run else "it did not run"
            raise RuntimeError(f"the second run in the account failed: {stderr}")
        summary: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
        if summary.get("status") != "completed" or summary.get("verifiedBlocks") != len(BLOCKS):
            raise RuntimeError(f"the second run in the account did not complete whole: {summary}")
        self._forget(str(summary["snapshotId"]))
        return summary

    def _forget(self, snapshot_id: str) -> None:
        """Not the execution's snapshot: deleted, and out of the run's own counts."""
        self.emu.boto3_client("ec2").delete_snapshot(SnapshotId=snapshot_id)
        state = self.emu.state
        with state.lock:
            if snapshot_id in state.snapshots_created:
                state.snapshots_created.remove(snapshot_id)
            if snapshot_id in state.direct.started:
                state.direct.started.remove(snapshot_id)
