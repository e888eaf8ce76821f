"""Progress lines on stderr: ``PHASE: PCT% DONE of TOTAL, RATE/s, ETA M:SS, bytes N/M`` (exact
N <= M for check_compaction), at most every few seconds; 100.0% only when done."""

import os
import sys
import threading
import time
from typing import Optional

PROGRESS_MARK = ", bytes "  # what every progress line carries before its exact figures
VOLUME = [""]  # job: " (volume i/n)", after each phase's name


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def log(message: str) -> None:
    """One line of diagnostics on stderr (stdout carries only the JSON summary)."""
    print(f"sparsecopy: {message}", file=sys.stderr, flush=True)


def default_interval() -> float:
    """SPARSECOPY_PROGRESS_SECONDS (tests: 0), else 2."""
    try:
        return max(float(os.environ.get("SPARSECOPY_PROGRESS_SECONDS", "2")), 0.0)
    except ValueError:
        return 2.0


def percent_of(done: int, total: int) -> float:
    """Rounded down to 0.1 (an empty total is done)."""
    if total <= 0:
        return 100.0
    return min(1000 * done // total, 1000) / 10


class Progress:
    """Thread-safe byte counter that reports itself every ``interval`` seconds. ``total`` is
    every byte the phase will ``add``: more is a bug, logged once, never shown above 100%."""

    def __init__(self, phase: str, total: int, interval: Optional[float] = None) -> None:
        self.phase = phase
        self.total = total
        self.done = 0
        self.interval = default_interval() if interval is None else interval
        self.started = time.monotonic()
        self.last = self.started
        self.lock = threading.Lock()
        self.overrun = False

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            if self.done > self.total and not self.overrun:
                self.overrun = True
                log(f"{self.phase}: internal error: {self.done} bytes of {self.total} counted")

    def maybe_report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        with self.lock:
            done = min(self.done, self.total)
        elapsed = max(now - self.started, 1e-6)
        rate = done / elapsed
        left = (self.total - done) / rate if rate > 0 else 0.0
        log(
            f"{self.phase}{VOLUME[0]}: {percent_of(done, self.total):5.1f}% {human(done)} of "
            f"{human(self.total)}, {human(rate)}/s, ETA {int(left) // 60}:{int(left) % 60:02d}"
            f"{PROGRESS_MARK}{done}/{self.total}"
        )
