"""Progress lines on stderr: percent, bytes, rate and ETA, at most every few seconds."""

import sys
import threading
import time


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def log(message: str) -> None:
    """One line of diagnostics on stderr (stdout carries only the JSON summary)."""
    print(f"sparsecopy: {message}", file=sys.stderr, flush=True)


class Progress:
    """Thread-safe byte counter that reports itself every ``interval`` seconds."""

    def __init__(self, phase: str, total: int, interval: float = 2.0) -> None:
        self.phase = phase
        self.total = total
        self.done = 0
        self.interval = interval
        self.started = time.monotonic()
        self.last = self.started
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n

    def maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        elapsed = max(now - self.started, 1e-6)
        rate = self.done / elapsed
        percent = 100.0 * self.done / self.total if self.total else 100.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        log(
            f"{self.phase}: {percent:5.1f}% {human(self.done)} of {human(self.total)}, "
            f"{human(rate)}/s, ETA {int(left) // 60}:{int(left) % 60:02d}"
        )
