"""What the emulator adds to moto's models: backing files, command runs, FSR and fault state.

moto's backends are process-wide, so the patches in ec2_twin/ssm_twin find the emulator through
the module-level `ACTIVE`; with no active emulator they behave exactly like moto.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit.ebs.quirks import DirectWrites
from devkit.loop import LoopDevices

from .command_runs import CommandRun, stop
from .encryption import FilledVolume
from .faults import Faults

GIB = 1024**3
# Polls a resource goes through before it settles (AWS answers "not yet" for a while).
SNAPSHOT_PENDING_POLLS = 2
FSR_POLLS_PER_STATE = 1
INSTANCE_INFO_MISSING_POLLS = 1


@dataclass
class EmulatorState:
    workdir: Path
    faults: Faults = field(default_factory=Faults)
    loops: LoopDevices = field(
        default_factory=lambda: LoopDevices("this emulator", wait_until_free=False)
    )
    lock: threading.RLock = field(default_factory=threading.RLock)
    volume_files: dict[str, Path] = field(default_factory=dict)
    snapshot_files: dict[str, Path] = field(default_factory=dict)
    # encryption.py: volumes made from a snapshot with encryption -> their key and held blocks
    volume_origins: dict[str, FilledVolume] = field(default_factory=dict)
    # snapshots the workflow made: id -> describe polls seen while pending
    snapshot_polls: dict[str, int] = field(default_factory=dict)
    fsr: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    instance_info_polls: dict[str, int] = field(default_factory=dict)
    # the runner's Distributed Map runs by map run ARN (map_runs.py: ListMapRuns, DescribeMapRun)
    map_runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    instances_launched: list[str] = field(default_factory=list)
    spot_failures_served: int = 0
    runs: dict[tuple[str, str], CommandRun] = field(default_factory=dict)
    tag_events: list[dict[str, Any]] = field(default_factory=list)
    # Where finished commands leave their stdout/stderr for people to read (optional).
    command_log_dir: Path | None = None
    # consistency.py: resource id -> tag-filtered Describe* answers that still leave it out
    tag_lag: dict[str, int] = field(default_factory=dict)
    tag_lag_hidden: int = 0
    # every snapshot made by CreateSnapshot / AMI registered while the emulator runs, in order
    snapshots_created: list[str] = field(default_factory=list)
    images_created: list[str] = field(default_factory=list)
    # consistency.py: snapshot id -> DeleteSnapshot calls still refused after DeregisterImage
    deregister_settling: dict[str, int] = field(default_factory=dict)
    snapshot_in_use_served: int = 0
    # injection.py: Task state -> throttling errors served to requests sent from that state
    throttled_served: dict[str, int] = field(default_factory=dict)
    # boot.py: the twin's AL2023 transfer AMI, registered on first use
    transfer_image_id: str | None = None
    # injection.py: instances terminated by a `lost@STATE` fault
    lost_instances: list[str] = field(default_factory=list)
    # server.function_credentials: access key id -> the function (role) it belongs to; the IAM
    # recorder attributes a presigned URL to the function whose key signed it
    access_keys: dict[str, str] = field(default_factory=dict)
    # ssm_twin.instance_env: access key id of an instance's role session -> its instance id (the
    # recorder gives the instance's calls ec2:SourceInstanceArn, as IAM does)
    instance_keys: dict[str, str] = field(default_factory=dict)
    # instance_metadata.py (Faults.ebs_credentials_seconds): session token -> its Expiration, the
    # role credential sets the instances fetched, requests refused for an expired token
    session_expiry: dict[str, float] = field(default_factory=dict)
    credentials_issued: int = 0
    expired_tokens_refused: int = 0
    # s3_twin.py: function name -> the buckets it may s3:ListBucket on a GetObject (twin/deploy.py);
    # a missing key in any other bucket is 403 AccessDenied for it
    s3_listable: dict[str, frozenset[str]] = field(default_factory=dict)
    # ebs_direct.py (devkit/ebs): snapshots written with the EBS direct APIs
    direct: DirectWrites = field(default_factory=DirectWrites)
    # ec2_tags.py: every tag ever put on each snapshot (kept after a tag is removed or the
    # snapshot deleted): whether a snapshot was ever tagged delivered
    snapshot_tags_put: dict[str, dict[str, str]] = field(default_factory=dict)
    # the emulator's URL (server.start): a command's AWS_ENDPOINT_URL_EBS (ssm_twin.instance_env)
    endpoint: str = ""
    region: str = "us-east-1"
    # Emulator(diskless=True): commands run on the volumes' files with the data plane's disk
    # planning replayed (replay.py); replay_sources: snapshot id -> (INPUT, volume index) of the
    # recorded run it stands for (twin/recording.py registers them)
    diskless: bool = False
    replay_sources: dict[str, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for sub in ("volumes", "snapshots", "commands"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)

    def stop_runs_on(self, instance_id: str) -> None:
        """The instance is going away: kill what runs on it and free its devices (the agent
        dies with it: nobody reports an end)."""
        with self.lock:
            runs = [r for (_, iid), r in self.runs.items() if iid == instance_id]
        for run in runs:
            if run.status in ("Pending", "InProgress"):
                run.instance_gone = True
                stop(run)

    def stop_all_runs(self) -> None:
        with self.lock:
            runs = list(self.runs.values())
        for run in runs:
            stop(run)


ACTIVE: EmulatorState | None = None
