"""The one warm Lambda zygote of this process (twin/runner/lambda_zygote.py), started on first use
and ended with the process: every runner this process starts forks its function workers from it."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

RUNNER = Path(__file__).resolve().parent / "runner"
ZYGOTE = RUNNER / "lambda_zygote.py"
SPAWN = RUNNER / "lambda_spawn.py"

_lock = threading.Lock()
_running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}


def socket_path() -> Path:
    """The zygote's socket, starting the zygote when it is not running."""
    with _lock:
        running = _running.get("zygote")
        if running is not None and running[0].poll() is None:
            return running[1]
        path = Path(tempfile.mkdtemp(prefix="twin-zygote-")) / "socket"
        proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE), str(path)],
            stdin=subprocess.PIPE,  # its end of file tells the zygote to stop
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != b"ready":
            proc.kill()
            raise RuntimeError(f"the Lambda zygote did not start (it said {ready!r})")
        _running["zygote"] = (proc, path)
        return path


def _stop() -> None:
    running = _running.pop("zygote", None)
    if running is not None:
        proc, path = running
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(path.parent, ignore_errors=True)  # the socket and the workers' bytecode


atexit.register(_stop)
