"""What one twin scenario runs: FS, INPUT, TARGET, TRIGGER, FAULT, OS, BOOT_MODE, DRY_RUN and
ENCRYPTED of `make demo`, where the cloud assembly is and where the report goes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devkit import needs

from . import disks
from .emulator.faults import parse

REPO = Path(__file__).resolve().parents[1]
OSES = ("none", "debian")
# The AMI's BootMode with OS=debian and the firmware QEMU boots it with.
BOOT_MODES = ("legacy-bios", "uefi")
# TARGET: the execution input's `target` (None: the input has none, the workflow's default)
TARGETS = ("snapshot", "volume")


@dataclass
class Options:
    fs: str = "ext4"
    input: str = "snapshot"
    trigger: str = "api"
    fault: str | None = None
    cdk_out: Path = REPO / "cdk.out"
    out_dir: Path = REPO / "out" / "demo"
    seed: int = 0
    wait_ms: int = 100
    picture: bool = True
    # OS=debian: the source AMI's root is a real Debian disk, and both AMIs are booted in QEMU.
    os: str = "none"
    boot_mode: str | None = None  # OS=debian: legacy-bios (the default) or uefi
    # BATCH=N: a batch of N items (N-1 source snapshots and one missing snapshot) through the batch
    # workflow (twin/batch.py), at most batch_concurrency children at once
    batch: int = 0
    batch_concurrency: int = 2
    # DRY_RUN=1: the execution input says "dryRun": true (an estimate: no target, snapshot or AMI)
    dry_run: bool = False
    # TARGET=snapshot|volume: the execution input's `target` (the new snapshot written directly
    # with the EBS direct APIs, or through a target volume and CreateSnapshot); None leaves it out
    target: str | None = None
    # DISKLESS=1: no disks; the data plane's planning of each disk is replayed from a recording
    # of real runs (twin/emulator/replay.py, twin/recording.py): seconds a run, no root needed
    diskless: bool = False
    # ENCRYPTED (1 by default; 0: unencrypted): the source snapshots are encrypted with a customer
    # managed KMS key of the account, so every volume restored from them, and from the new
    # snapshots, reads random bytes where its snapshot holds no block (emulator/encryption.py)
    encrypted: bool = True

    @property
    def ami_boot_mode(self) -> str | None:
        """The source AMI's BootMode with OS=debian (legacy-bios unless BOOT_MODE says)."""
        return (self.boot_mode or "legacy-bios") if self.os == "debian" else None

    def validate(self) -> None:
        if self.fs not in disks.FILESYSTEMS:
            raise ValueError(f"FS={self.fs}: choose one of {', '.join(disks.FILESYSTEMS)}")
        if self.input not in ("snapshot", "ami"):
            raise ValueError(f"INPUT={self.input}: choose snapshot or ami")
        if self.target not in (None, *TARGETS):
            raise ValueError(f"TARGET={self.target}: choose one of {', '.join(TARGETS)}")
        if self.trigger not in ("api", "tag"):
            raise ValueError(f"TRIGGER={self.trigger}: choose api or tag")
        if self.trigger == "tag" and self.input != "snapshot":
            raise ValueError("TRIGGER=tag starts compactions of snapshots: use INPUT=snapshot")
        if self.target == "volume" and (self.trigger == "tag" or self.batch):
            raise ValueError(
                "TARGET=volume goes into an execution input started through the API (the tag "
                "trigger and the batch use the default target, snapshot)"
            )
        self._validate_os()
        self._validate_batch()
        if self.diskless and (self.fs != "ext4" or self.os != "none" or self.batch):
            raise ValueError("DISKLESS=1 replays the recorded ext4 disks of one execution: leave "
                             "FS, OS and BATCH at their defaults")  # fmt: skip
        if self.dry_run and (self.trigger != "api" or self.batch or self.os != "none"):
            raise ValueError("DRY_RUN=1 starts one dry run through the API: leave TRIGGER, BATCH "
                             "and OS at their defaults")  # fmt: skip
        parse(self.fault)  # the state is checked against the definition once deployed

    def _validate_batch(self) -> None:
        if not self.batch:
            return
        if self.batch < 1 or self.batch > 20:
            raise ValueError(f"BATCH={self.batch}: choose 1..20 items (each is a real copy)")
        defaults = self.input == "snapshot" and self.trigger == "api" and self.os == "none"
        # ebs-account-quota: the batch's children are the runs that share the account's quota
        fault = parse(self.fault)
        if not defaults or (fault and fault != "ebs-account-quota"):
            raise ValueError("BATCH=N runs snapshot items started through the API: leave INPUT, "
                             "TRIGGER and OS at their defaults, FAULT empty or "
                             "ebs-account-quota")  # fmt: skip

    def _validate_os(self) -> None:
        if self.os not in OSES:
            raise ValueError(f"OS={self.os}: choose one of {', '.join(OSES)}")
        if self.boot_mode is not None and self.boot_mode not in BOOT_MODES:
            raise ValueError(f"BOOT_MODE={self.boot_mode}: choose one of {', '.join(BOOT_MODES)}")
        if self.os == "none":
            if self.boot_mode is not None:
                raise ValueError(f"BOOT_MODE={self.boot_mode} is the boot mode of OS=debian's AMI: "
                                 "add OS=debian INPUT=ami")  # fmt: skip
            return
        if self.input != "ami":
            raise ValueError(f"OS={self.os} builds the source AMI's root disk: use INPUT=ami")
        if self.fs != "ext4":
            raise ValueError(f"OS={self.os}: the Debian root is ext4, FS={self.fs} does not apply")
        missing = needs.missing_tools(needs.BOOT_TOOLS)
        if missing:
            raise ValueError(f"OS={self.os} {missing}")
