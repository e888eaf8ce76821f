"""Boot a disk image in QEMU (TCG) through its own bootloader, BIOS (SeaBIOS) or UEFI (OVMF), and
read the serial console until the boot-check init prints its marker line and powers off.

The disk is opened with snapshot=on: the guest replays journals and writes, the image stays
unchanged. Dead ends (grub rescue>, a kernel panic, the UEFI shell, no GRUB within the GRUB
deadline) fail fast; running into the timeout is a failure too."""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS.fd")
MARKER = "BOOT-CHECK "
FATAL = (
    "Minimal BASH-like line editing",
    "grub rescue>",
    "Kernel panic",
    "No bootable device",
    "Boot failed: not a bootable disk",
    "Gave up waiting for root",
    "ALERT!",
    "UEFI Interactive Shell",
)
MILESTONES = {
    "grub": "GRUB: loading kernel",
    "kernel": "Linux version",
    "init": "Run /usr/local/sbin/boot-check",
    "marker": MARKER,
}
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1bc")
FATAL_GRACE = 3.0  # seconds of console kept after a dead end, for the tail
WALL_CAP = 4  # the timeout in wall seconds, however starved the guest: no boot hangs a suite


class GuestClock:
    """Seconds since QEMU started, less the time its vCPU threads waited for a host CPU
    (run_delay in /proc/PID/task/TID/schedstat). A TCG guest on a busy host (a suite runs boots
    and other lanes side by side on two cores) is slower in wall time but not in this clock, so
    the GRUB deadline and the timeout judge the guest, not the host. A halted guest's thread
    sleeps and waits for no CPU: its clock runs like the wall's. Without schedstat: wall time."""

    def __init__(self, pid: int, started: float) -> None:
        self.tasks, self.started = Path(f"/proc/{pid}/task"), started

    def wall(self) -> float:
        return time.monotonic() - self.started

    def now(self) -> float:
        return self.wall() - self.starved()

    def starved(self) -> float:
        waited = 0
        for task in self.tasks.glob("*"):
            try:
                if (task / "comm").read_text().startswith("CPU "):
                    waited += int((task / "schedstat").read_text().split()[1])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended, or a kernel without schedstat
        return waited / 1e9


@dataclass
class BootResult:
    """One boot: whether the marker said ok, how long it took and what the console showed."""

    image: str
    firmware: str
    boots: bool
    seconds: float
    marker: str | None  # the marker line, from "BOOT-CHECK" on
    timed_out: bool
    fatal: str | None  # the dead end met, e.g. "grub rescue>" or "no GRUB"
    qemu_rc: int | None
    milestones: dict[str, float] = field(default_factory=dict)  # seconds from QEMU start
    console_tail: list[str] = field(default_factory=list)

    @property
    def problems(self) -> int | None:
        """`problems=N` of the marker line (dpkg --verify lines in the guest)."""
        found = re.search(r"problems=(\d+)", self.marker or "")
        return int(found.group(1)) if found else None


def qemu_command(image: Path, firmware: str, vars_copy: Path, iface: str, memory: int) -> list[str]:
    # debug-threads names the vCPU thread "CPU 0/TCG", whose waits GuestClock subtracts
    cmd = ["qemu-system-x86_64", "-accel", "tcg", "-m", str(memory), "-smp", "1", "-nographic",
           "-serial", "mon:stdio", "-no-reboot", "-nic", "none",
           "-name", "boot,debug-threads=on"]  # fmt: skip
    if iface == "nvme":  # like a Nitro instance's EBS volume
        cmd += ["-drive", f"file={image},format=raw,if=none,id=root,snapshot=on",
                "-device", "nvme,drive=root,serial=vol0123456789"]  # fmt: skip
    else:
        cmd += ["-drive", f"file={image},format=raw,if={iface},snapshot=on"]
    if firmware == "uefi":
        cmd += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                "-drive", f"if=pflash,format=raw,unit=1,file={vars_copy}"]  # fmt: skip
    elif firmware != "bios":
        raise ValueError(f"firmware must be bios or uefi, not {firmware!r}")
    return cmd


class Console:
    """The serial console read so far: clean lines with their time, milestones, dead ends."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.milestones: dict[str, float] = {}
        self.marker: str | None = None
        self.fatal: str | None = None
        self.fatal_at = 0.0
        self._pending = b""

    def feed(self, data: bytes, now: float) -> None:
        self._pending += data
        while b"\n" in self._pending:
            raw, self._pending = self._pending.split(b"\n", 1)
            self.line(
                ESCAPES.sub("", raw.decode("utf-8", "replace").replace("\r", "")).rstrip(), now
            )
        # prompts ("grub rescue> ", "Shell> ") come without a newline
        partial = self._pending.decode("utf-8", "replace")
        if self.fatal is None and any(f in partial for f in FATAL):
            self.line(ESCAPES.sub("", partial.replace("\r", "")), now)

    def line(self, text: str, now: float) -> None:
        self.lines.append(f"[{now:6.1f}] {text}")
        for key, needle in MILESTONES.items():
            if needle in text:
                self.milestones.setdefault(key, round(now, 1))
        if MARKER in text and self.marker is None:
            self.marker = text[text.index(MARKER.strip()) :]
        dead_end = next((f for f in FATAL if f in text), None)
        if dead_end and self.fatal is None:
            self.fatal, self.fatal_at = dead_end, now


def boot(
    image: Path,
    firmware: str,
    *,
    timeout: float = 180.0,
    grub_deadline: float = 25.0,
    iface: str = "virtio",
    memory: int = 1024,
    log: Path | None = None,
) -> BootResult:
    """Boot `image` ("bios" or "uefi") and wait for the marker and QEMU's exit (guest power-off).
    `grub_deadline`: fail when GRUB has not echoed "GRUB: loading kernel" by then (a BIOS disk
    without core.img prints nothing after SeaBIOS' "Booting from Hard Disk...")."""
    with tempfile.TemporaryDirectory(prefix="qemu-boot-") as tmp:
        vars_copy = Path(tmp) / "OVMF_VARS.fd"
        if firmware == "uefi":
            shutil.copyfile(OVMF_VARS, vars_copy)
        cmd = qemu_command(image, firmware, vars_copy, iface, memory)
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            console, timed_out = watch(proc, GuestClock(proc.pid, started), timeout, grub_deadline)
        finally:
            if proc.poll() is None:
                proc.kill()
            rc = proc.wait()
    seconds = round(time.monotonic() - started, 1)
    if log is not None:
        log.write_text("\n".join(console.lines) + "\n")
    ok = (
        not timed_out
        and console.fatal is None
        and (console.marker or "").startswith("BOOT-CHECK ok")
    )
    return BootResult(
        str(image), firmware, ok, seconds, console.marker, timed_out, console.fatal, rc,
        console.milestones, [] if ok else console.lines[-15:],
    )  # fmt: skip


def watch(
    proc: subprocess.Popen[bytes], clock: GuestClock, timeout: float, grub_deadline: float
) -> tuple[Console, bool]:
    """Read the console until QEMU exits, a dead end has had its grace, or time runs out (the
    guest's time: GuestClock). Returns the console and whether the timeout ended it. Console
    lines and milestones keep wall time: what a reader of the log waited."""
    assert proc.stdout is not None
    console = Console()
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    while True:
        now, guest = clock.wall(), clock.now()
        if console.fatal is not None and now - console.fatal_at > FATAL_GRACE:
            return console, False
        if "grub" not in console.milestones and guest > grub_deadline:
            console.fatal, console.fatal_at = "no GRUB", now
            return console, False
        if guest >= timeout or now >= timeout * WALL_CAP:
            return console, True
        if not selector.select(timeout=1.0):
            if proc.poll() is not None:
                return console, False
            continue
        data = os.read(proc.stdout.fileno(), 65536)
        if not data:
            return console, False
        console.feed(data, clock.wall())
