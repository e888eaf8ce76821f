"""devkit.qemu_boot.GuestClock: a boot's deadlines count the time the guest could run, so a busy
host (the suite's other lanes) cannot make a good boot miss its GRUB deadline, while a guest that
halts still meets it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from devkit.qemu_boot import GuestClock

# A stand-in for QEMU's vCPU thread: named as debug-threads names it, then busy or asleep.
GUEST = """
import sys, threading, time
def vcpu():
    open(f"/proc/self/task/{threading.get_native_id()}/comm", "w").write("CPU 0/TCG")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if sys.argv[1] == "sleep":
            time.sleep(0.05)
threading.Thread(target=vcpu, daemon=True).start()
time.sleep(30)
"""


@contextmanager
def guest(mode: str, cpu: int) -> Iterator[int]:
    proc = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", GUEST, mode])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def burners(count: int, cpu: int) -> Iterator[None]:
    procs = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while 1: pass"])
             for _ in range(count)]  # fmt: skip
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _after(pid: int, seconds: float) -> tuple[float, float]:
    clock = GuestClock(pid, time.monotonic())
    time.sleep(seconds)
    return clock.wall(), clock.now()


def test_a_starved_guest_s_clock_runs_slow() -> None:
    cpu = max(os.sched_getaffinity(0))
    with guest("busy", cpu) as pid, burners(3, cpu):
        time.sleep(0.5)  # the guest's thread is named and busy
        wall, guest_time = _after(pid, 3.0)
    # four busy threads on one CPU: the guest ran about a quarter of the wall time
    assert guest_time < wall * 0.6, (wall, guest_time)


def test_a_sleeping_guest_s_clock_runs_with_the_wall() -> None:
    with guest("sleep", max(os.sched_getaffinity(0))) as pid:
        time.sleep(0.5)
        wall, guest_time = _after(pid, 2.0)
    assert guest_time > wall * 0.9, (wall, guest_time)
