"""What one twin scenario runs: FS, INPUT, TRIGGER and FAULT of `make demo`, where the cloud
assembly is and where the report goes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import disks
from .emulator.faults import parse

REPO = Path(__file__).resolve().parents[1]


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

    def validate(self) -> None:
        if self.fs not in disks.FILESYSTEMS:
            raise ValueError(f"FS={self.fs}: choose one of {', '.join(disks.FILESYSTEMS)}")
        if self.input not in ("snapshot", "ami"):
            raise ValueError(f"INPUT={self.input}: choose snapshot or ami")
        if self.trigger not in ("api", "tag"):
            raise ValueError(f"TRIGGER={self.trigger}: choose api or tag")
        if self.trigger == "tag" and self.input != "snapshot":
            raise ValueError("TRIGGER=tag starts compactions of snapshots: use INPUT=snapshot")
        parse(self.fault)  # the state is checked against the definition once deployed
