"""One demo run: build a dirty disk, register it, deploy the synthesized stack into the emulator,
start the execution (API or tag trigger), then check the outcome and write the report."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import disks
from .cfn import Deployment
from .deploy import deploy
from .emulator.blockstore import EBS_BLOCK, written_chunks
from .emulator.faults import FAULTS, Faults
from .emulator.server import Emulator
from .eventbridge import matches, transform
from .execution import ExecutionResult, execute
from .picture import block_picture
from .verify import verify

REPO = Path(__file__).resolve().parents[1]
EXECUTION_TAG = "ebs-snapshot-compactor:execution"
SOURCE_TAGS = {"Name": "twin-demo", "team": "storage"}
AMI_ATTRIBUTES = {
    "Description": "twin demo image: GPT/EFI/ext4 root and an ext4 data volume",
    "Architecture": "x86_64",
    "RootDeviceName": "/dev/xvda",
    "VirtualizationType": "hvm",
    "BootMode": "uefi-preferred",
    "EnaSupport": True,
    "SriovNetSupport": "simple",
    "TpmSupport": "v2.0",
    "ImdsSupport": "v2.0",
}
FSR_ZONE = "us-east-1a"
THROTTLED_CALLS = 2  # per function; the stack's Lambda retriers allow more attempts than this


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

    def validate(self) -> None:
        if self.fs not in disks.FILESYSTEMS:
            raise ValueError(f"FS={self.fs}: choose one of {', '.join(disks.FILESYSTEMS)}")
        if self.input not in ("snapshot", "ami"):
            raise ValueError(f"INPUT={self.input}: choose snapshot or ami")
        if self.trigger not in ("api", "tag"):
            raise ValueError(f"TRIGGER={self.trigger}: choose api or tag")
        if self.trigger == "tag" and self.input != "snapshot":
            raise ValueError("TRIGGER=tag starts compactions of snapshots: use INPUT=snapshot")
        if self.fault not in (None, "", "none", *FAULTS):
            raise ValueError(f"FAULT={self.fault}: choose one of {', '.join(FAULTS)}")


@dataclass
class Source:
    kind: str
    snapshot_ids: list[str]
    disks: list[Any]
    image_id: str | None = None
    fingerprints: dict[str, str | None] = field(default_factory=dict)


def _execution_name() -> str:
    return f"twin-{uuid.uuid4().hex[:12]}"


def _register(emu: Emulator, opts: Options, work: Path) -> Source:
    if opts.input == "snapshot":
        disk = disks.build(opts.fs, work / "source.img", opts.seed)
        sid = emu.register_snapshot(disk.path, "twin demo: a dirty disk", dict(SOURCE_TAGS))
        return Source("snapshot", [sid], [disk])
    root = disks.build(opts.fs, work / "root.img", opts.seed)
    data = disks.build("bare-ext4", work / "data.img", opts.seed + 10)
    image_id, sids = emu.register_ami(
        "twin-demo-image", [("/dev/xvda", root.path), ("/dev/sdb", data.path)], AMI_ATTRIBUTES
    )
    emu.boto3_client("ec2").create_tags(
        Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in SOURCE_TAGS.items()]
    )
    return Source("image", sids, [root, data], image_id=image_id)


def _fingerprints(emu: Emulator, source: Source) -> dict[str, str | None]:
    ec2 = emu.boto3_client("ec2")
    out: dict[str, str | None] = {}
    for sid in source.snapshot_ids:
        described = ec2.describe_snapshots(Filters=[{"Name": "snapshot-id", "Values": [sid]}])
        meta = [
            {k: s.get(k) for k in ("State", "VolumeSize", "Description", "Encrypted")}
            | {"Tags": sorted((t["Key"], t["Value"]) for t in s.get("Tags", []))}
            for s in described["Snapshots"]
        ]
        out[sid] = f"{emu.snapshot_fingerprint(sid)}|{json.dumps(meta, sort_keys=True)}"
    return out


def _trigger_input(emu: Emulator, d: Deployment, source: Source) -> tuple[Any, list[str]]:
    """Tag the snapshot and let the deployed rules decide: (execution input or None, notes)."""
    trigger_key = next(iter(d.functions.values())).env.get("TRIGGER_TAG_KEY", "compact")
    emu.state.tag_events.clear()
    emu.boto3_client("ec2").create_tags(
        Resources=[source.snapshot_ids[0]], Tags=[{"Key": trigger_key, "Value": "true"}]
    )
    return _started_by_events(emu, d)


def _started_by_events(emu: Emulator, d: Deployment) -> tuple[Any, list[str]]:
    inputs, notes = [], []
    for event in list(emu.state.tag_events):
        for rule in d.rules:
            if not matches(rule.pattern, event):
                continue
            rule_arn = f"arn:aws:events:{d.region}:{d.account}:rule/{rule.name}"
            for target in rule.targets:
                if target.get("Arn") == d.state_machine_arn:
                    inputs.append(transform(target, event, rule_arn, rule.name))
                    notes.append(f"rule {rule.logical_id} matched {event['resources'][0]}")
    emu.state.tag_events.clear()
    if len(inputs) > 1:
        raise RuntimeError(f"one tag change started {len(inputs)} executions: {notes}")
    return (inputs[0] if inputs else None), notes


def _leaks(emu: Emulator, name: str, keep_snapshots: set[str], keep_image: str | None) -> list[str]:
    ec2 = emu.boto3_client("ec2")
    leaks = []
    for reservation in ec2.describe_instances()["Reservations"]:
        for inst in reservation["Instances"]:
            if inst["State"]["Name"] != "terminated":
                leaks.append(f"instance {inst['InstanceId']} ({inst['State']['Name']})")
    # The workflow is the only creator of volumes here: every volume left over is a leak.
    leaks += [f"volume {v['VolumeId']}" for v in ec2.describe_volumes()["Volumes"]]
    tagged = [{"Name": f"tag:{EXECUTION_TAG}", "Values": [name]}]
    for snap in ec2.describe_snapshots(OwnerIds=["self"], Filters=tagged)["Snapshots"]:
        if snap["SnapshotId"] not in keep_snapshots:
            leaks.append(f"snapshot {snap['SnapshotId']}")
    for image in ec2.describe_images(Owners=["self"], Filters=tagged)["Images"]:
        if image["ImageId"] != keep_image:
            leaks.append(f"image {image['ImageId']}")
    leaks += [f"loop device {dev}" for dev in emu.state.loops.attached]
    # Also what the kernel still holds, e.g. a device a killed program stacked on a volume.
    leaks += [
        f"kernel loop device {dev}"
        for dev in emu.state.loops.kernel_leftovers(emu.state.workdir)
        if dev not in emu.state.loops.attached
    ]
    return leaks


def _outputs(result: ExecutionResult) -> tuple[list[dict[str, Any]], str | None]:
    report = result.output if result.status == "SUCCEEDED" else None
    if not isinstance(report, dict):
        return [], None
    return list(report.get("volumes") or []), report.get("imageId")


def _ami_check(emu: Emulator, source: Source, image_id: str | None) -> dict[str, Any]:
    if source.image_id is None:
        return {}
    ec2 = emu.boto3_client("ec2")
    check: dict[str, Any] = {"new_image_id": image_id, "attributes_equal": False, "fsr": []}
    if image_id is None:
        return check
    old = ec2.describe_images(ImageIds=[source.image_id])["Images"][0]
    new = ec2.describe_images(ImageIds=[image_id])["Images"][0]
    keys = [
        "Architecture", "RootDeviceName", "VirtualizationType", "BootMode",
        "EnaSupport", "SriovNetSupport", "TpmSupport", "ImdsSupport",
    ]  # fmt: skip
    differ = {k: (old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)}
    old_devices = sorted(m["DeviceName"] for m in old["BlockDeviceMappings"])
    new_devices = sorted(m["DeviceName"] for m in new["BlockDeviceMappings"])
    if old_devices != new_devices:
        differ["BlockDeviceMappings"] = (old_devices, new_devices)
    check["attribute_differences"] = {k: list(v) for k, v in differ.items()}
    check["attributes_equal"] = not differ
    new_snaps = [m["Ebs"]["SnapshotId"] for m in new["BlockDeviceMappings"] if "Ebs" in m]
    if new_snaps:
        fsr = ec2.describe_fast_snapshot_restores(
            Filters=[{"Name": "snapshot-id", "Values": new_snaps}]
        )["FastSnapshotRestores"]
        check["fsr"] = [
            {"snapshotId": f["SnapshotId"], "zone": f["AvailabilityZone"], "state": f["State"]}
            for f in fsr
        ]
    return check


def _bad_inputs(emu: Emulator, work: Path, source: Source) -> list[tuple[str, Any, str]]:
    """(case, execution input, the error the workflow must fail with)."""
    pending = emu.register_snapshot(
        source.disks[0].path, "twin demo: still being taken", state="pending"
    )
    return [
        ("unknown-snapshot", {"snapshotId": "snap-0123456789abcdef0"}, "SnapshotNotFound"),
        ("snapshot-not-completed", {"snapshotId": pending}, "SnapshotNotCompleted"),
        ("malformed-input", {"snapshotId": source.snapshot_ids[0], "jobz": 4}, "InvalidInput"),
    ]


def run(opts: Options) -> dict[str, Any]:
    opts.validate()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="twin-demo-"))
    logdir = opts.out_dir / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    fault = None if opts.fault in (None, "", "none") else opts.fault
    try:
        with Emulator(work / "emulator", Faults.named(fault)) as emu:
            return _run_in(emu, opts, fault, work, logdir, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_in(
    emu: Emulator, opts: Options, fault: str | None, work: Path, logdir: Path, started: float
) -> dict[str, Any]:
    emu.state.command_log_dir = logdir / "commands"
    d = deploy(emu, opts.cdk_out)
    source = _register(emu, opts, work)
    fingerprints_before = _fingerprints(emu, source)
    source_chunks = {
        sid: len(written_chunks(emu.snapshot_file(sid))) for sid in source.snapshot_ids
    }
    env_overrides = {"ALLOW_ON_DEMAND": "false"} if fault == "no-capacity" else {}
    throttled = THROTTLED_CALLS if fault == "throttle" else 0
    notes: list[str] = []
    if env_overrides:
        notes.append(f"stack setting overridden for this fault: {env_overrides}")

    def run_one(execution_input: Any) -> ExecutionResult:
        return execute(
            emu, d, execution_input, _execution_name(), logdir,
            env_overrides=env_overrides, throttled_calls_per_function=throttled,
            wait_ms=opts.wait_ms,
        )  # fmt: skip

    cases: list[dict[str, Any]] = []
    result: ExecutionResult | None = None
    if fault == "bad-input":
        for case, bad_input, expected in _bad_inputs(emu, work, source):
            launched_before = len(emu.state.instances_launched)
            case_result = run_one(bad_input)
            case_leaks = _leaks(emu, case_result.name, set(), None)
            cases.append(
                {
                    "case": case,
                    "input": bad_input,
                    "expected_error": expected,
                    "execution_status": case_result.status,
                    "error": case_result.error,
                    "cause": case_result.cause,
                    "states_visited": case_result.states_visited,
                    "leaked_resources": len(case_leaks),
                    "created_nothing": len(emu.state.instances_launched) == launched_before
                    and not emu.state.volume_files
                    and not case_leaks,
                }
            )
    elif opts.trigger == "tag":
        execution_input, trigger_notes = _trigger_input(emu, d, source)
        notes += trigger_notes
        # The trigger tag is the user's change; the workflow must change nothing from here on.
        fingerprints_before = _fingerprints(emu, source)
        if execution_input is None:
            raise RuntimeError("tagging the snapshot started no execution: no rule matched")
        result = run_one(execution_input)
    else:
        execution_input = (
            {"snapshotId": source.snapshot_ids[0]}
            if source.kind == "snapshot"
            else {"imageId": source.image_id, "fastSnapshotRestoreAzs": [FSR_ZONE]}
        )
        result = run_one(execution_input)

    outputs, new_image = _outputs(result) if result else ([], None)
    new_snapshots = [v["newSnapshotId"] for v in outputs if v.get("newSnapshotId")]
    retriggered = 0
    if opts.trigger == "tag" and result is not None:
        # Tags the workflow put on its results must not start another compaction.
        again, _ = _started_by_events(emu, d)
        retriggered = 0 if again is None else 1
    leaks = _leaks(emu, result.name, set(new_snapshots), new_image) if result is not None else []
    leaks += [
        f"{c['case']}: {c['leaked_resources']} resources" for c in cases if c["leaked_resources"]
    ]
    fingerprints_after = _fingerprints(emu, source)
    unchanged = fingerprints_after == fingerprints_before

    verification = []
    new_chunks_total = 0
    panels: list[tuple[str, set[int], int]] = []
    for index, sid in enumerate(source.snapshot_ids):
        total = emu.snapshot_file(sid).stat().st_size // EBS_BLOCK
        panels.append((f"before: {sid} ({source_chunks[sid]} blocks)",
                       written_chunks(emu.snapshot_file(sid)), total))  # fmt: skip
        match = [v for v in outputs if v.get("sourceSnapshotId") == sid]
        new_id = match[0].get("newSnapshotId") if match else None
        if new_id and new_id in emu.state.snapshot_files:
            new_file = emu.snapshot_file(new_id)
            chunks = written_chunks(new_file)
            new_chunks_total += len(chunks)
            panels.append((f"after: {new_id} ({len(chunks)} blocks)", chunks, total))
            checked = verify(source.disks[index], new_file, work / f"verify-{index}")
            verification.append(
                {
                    "sourceSnapshotId": sid,
                    "newSnapshotId": new_id,
                    "files_checked": checked.files_checked,
                    "files_verified": checked.files_verified,
                    "fsck_clean": checked.fsck_clean,
                    "problems": checked.problems,
                }
            )

    primary = result
    report: dict[str, Any] = {
        "scenario": {
            "fs": opts.fs,
            "input": opts.input,
            "trigger": opts.trigger,
            "fault": fault or "none",
        },
        "execution_name": primary.name if primary else None,
        "execution_input": primary.input if primary else None,
        "execution_status": primary.status if primary else _cases_status(cases),
        "error": primary.error if primary else None,
        "cause": primary.cause if primary else None,
        "states_visited": primary.states_visited if primary else [],
        "state_durations": primary.state_seconds if primary else [],
        "phase_seconds": (primary.workflow_report or {}).get("phaseSeconds") if primary else None,
        "source_snapshot_ids": source.snapshot_ids,
        "source_image_id": source.image_id,
        "source_snapshot_chunks": sum(source_chunks.values()),
        "source_snapshot_bytes": sum(source_chunks.values()) * EBS_BLOCK,
        "new_snapshot_ids": new_snapshots,
        "new_snapshot_chunks": new_chunks_total,
        "new_snapshot_bytes": new_chunks_total * EBS_BLOCK,
        "bytes_read_from_source": sum(int(v.get("sourceBytesRead") or 0) for v in outputs),
        "bytes_written_to_target": sum(int(v.get("targetBytesWritten") or 0) for v in outputs),
        "files_verified": bool(verification) and all(v["files_verified"] for v in verification),
        "fsck_clean": bool(verification) and all(v["fsck_clean"] for v in verification),
        "verification": verification,
        "leaked_resources": len(leaks),
        "leaks": leaks,
        "source_snapshot_unchanged": unchanged,
        "instances_launched": len(emu.state.instances_launched),
        "lambda_invocations": len(primary.invocations) if primary else 0,
        "throttled_invocations": sum(
            1
            for i in (primary.invocations if primary else [])
            if i["error"] == "Lambda.TooManyRequestsException"
        ),
        "handlers_called": _handlers_called(d, primary) if primary else [],
        "spot_capacity_errors": emu.state.spot_failures_served,
        "retriggered_executions": retriggered,
        "image": _ami_check(emu, source, new_image),
        "bad_input_cases": cases,
        "workflow_report": primary.workflow_report if primary else None,
        "notes": notes,
        "twin_seconds": round(time.monotonic() - started, 1),
    }
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    picture = opts.out_dir / "blocks.svg"
    picture.write_text(block_picture(panels))
    report["picture"] = str(picture)
    (opts.out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def _handlers_called(d: Deployment, result: ExecutionResult) -> list[str]:
    """Handler modules in call order, repeated calls (poll loops, retries) shown once."""
    module = {f.name: f.handler.rsplit(".", 2)[-2] for f in d.functions.values()}
    called: list[str] = []
    for invocation in result.invocations:
        name = module.get(invocation["function"], invocation["function"])
        if not called or called[-1] != name:
            called.append(name)
    return called


def _cases_status(cases: list[dict[str, Any]]) -> str:
    statuses = {c["execution_status"] for c in cases}
    return statuses.pop() if len(statuses) == 1 else "MIXED"
