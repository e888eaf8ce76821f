"""One twin scenario (`make demo`, a sweep case, a test): build a dirty disk, register it, deploy
the synthesized stack into the emulator, start the execution (API or tag trigger, with a fault),
run the cleanup path EventBridge would start, then check the outcome and write the report.

The steps are small functions over one Context: _setup, _start (api / tag / bad-input),
_cleanup_path, _facts (what exists at the end), _verification, _report.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moto.stepfunctions.models import stepfunctions_backends

from . import bad_inputs, disks
from .cfn import Deployment
from .deploy import deploy
from .emulator import boot
from .emulator.blockstore import EBS_BLOCK, written_chunks
from .emulator.ec2_twin import boot_disk
from .emulator.faults import FAULTS, FaultError, FaultList, Faults, StateFault, parse, state_faults
from .emulator.s3_twin import objects_left
from .emulator.server import Emulator
from .eventbridge import deliveries, status_change_event
from .execution import ExecutionResult, Machine, execute, invoke_function, main_machine
from .execution import state_machines as template_state_machines
from .iam.check import check_calls
from .picture import block_picture
from .verify import verify

REPO = Path(__file__).resolve().parents[1]
EXECUTION_TAG = "ebs-snapshot-compactor:execution"
DELIVERED_TAG = "ebs-snapshot-compactor:delivered"
DELIVERED_STATE = "Delivered"
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
END_STATUSES_CLEANED = ("FAILED", "TIMED_OUT", "ABORTED")
TAG_DELIVERIES = 2  # EventBridge delivers at least once: the twin delivers the tag event twice
OBJECT_LEAK = "object "  # how a leaked S3 object is named in `leaks`


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


@dataclass
class Source:
    kind: str
    snapshot_ids: list[str]
    disks: list[Any]
    image_id: str | None = None
    fingerprints: dict[str, str | None] = field(default_factory=dict)


@dataclass
class Context:
    emu: Emulator
    opts: Options
    d: Deployment
    machines: dict[str, Machine]
    main: Machine
    fault: StateFault | FaultList | str | None
    work: Path
    logdir: Path
    source: Source | None = None
    notes: list[str] = field(default_factory=list)
    env_overrides: dict[str, str] = field(default_factory=dict)
    throttled: int = 0
    trigger: dict[str, Any] = field(default_factory=dict)

    @property
    def state_faults(self) -> list[StateFault]:
        """The KIND@STATE faults of this run (FAULT=A+B gives several)."""
        return state_faults(self.fault)


def _execution_name() -> str:
    return f"twin-{uuid.uuid4().hex[:12]}"


def fault_label(fault: StateFault | FaultList | str | None) -> str:
    return "none" if fault is None else str(fault)


# --- set-up -------------------------------------------------------------------------------------


def _register(emu: Emulator, opts: Options, work: Path) -> Source:
    if opts.input == "snapshot":
        disk = disks.build(opts.fs, work / "source.img", opts.seed)
        # The tag trigger fires on a snapshot still being taken (tag at creation, DLM, Backup).
        pending = opts.trigger == "tag"
        sid = emu.register_snapshot(
            disk.path, "twin demo: a dirty disk", dict(SOURCE_TAGS),
            state="pending" if pending else "completed", completes=True,
        )  # fmt: skip
        return Source("snapshot", [sid], [disk])
    # A golden image built from the same AL2023 release as the transfer AMI: its root
    # filesystem has the transfer AMI's root UUID (emulator/boot.py), so a transfer instance
    # launched with it mapped boots from it.
    base_uuid = boot.AL2023_ROOT_UUID if opts.fs in ("ext4", "xfs") else None
    root = disks.build(opts.fs, work / "root.img", opts.seed, root_uuid=base_uuid)
    data = disks.build("bare-ext4", work / "data.img", opts.seed + 10)
    image_id, sids = emu.register_ami(
        "twin-demo-image", [("/dev/xvda", root.path), ("/dev/sdb", data.path)], AMI_ATTRIBUTES
    )
    emu.boto3_client("ec2").create_tags(
        Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in SOURCE_TAGS.items()]
    )
    return Source("image", sids, [root, data], image_id=image_id)


def _fingerprints(emu: Emulator, source: Source) -> dict[str, str | None]:
    """Data, size, description, encryption and tags of each source snapshot, read from the
    emulator's model (not the API: a Describe would advance pending snapshots). The state is left
    out: a pending source completing is AWS's doing, not the workflow's."""
    out: dict[str, str | None] = {}
    for sid in source.snapshot_ids:
        snap = emu.ec2.snapshots.get(sid)
        meta = (
            None
            if snap is None
            else {
                "VolumeSize": snap.volume.size,
                "Description": snap.description,
                "Encrypted": snap.encrypted,
                "Tags": sorted(emu.ec2.tags.get(sid, {}).items()),
            }
        )
        out[sid] = f"{emu.snapshot_fingerprint(sid)}|{json.dumps(meta, sort_keys=True)}"
    return out


def _setup(emu: Emulator, opts: Options, fault: StateFault | FaultList | str | None, work: Path,
           logdir: Path) -> Context:  # fmt: skip
    emu.state.command_log_dir = logdir / "commands"
    d = deploy(emu, opts.cdk_out)
    machines = template_state_machines(d, opts.cdk_out)
    main = main_machine(d, machines)
    if isinstance(fault, StateFault | FaultList):
        parse(str(fault), main.task_states())  # raises FaultError naming the Task states
    ctx = Context(emu, opts, d, machines, main, fault, work, logdir)
    if fault == "no-capacity":
        ctx.env_overrides = {"ALLOW_ON_DEMAND": "false"}
        ctx.notes.append(f"stack setting overridden for this fault: {ctx.env_overrides}")
    ctx.throttled = THROTTLED_CALLS if fault == "throttle" else 0
    _deploy_machines_into_moto(ctx)
    ctx.source = _register(emu, opts, work)
    return ctx


def _deploy_machines_into_moto(ctx: Context) -> None:
    """StartExecution (the start_from_tag Lambda, EventBridge) lands in moto's Step Functions;
    the twin then runs each execution it finds there with the runner."""
    backend = stepfunctions_backends[ctx.d.account][ctx.d.region]
    existing = {sm.arn for sm in backend.state_machines}
    for machine in ctx.machines.values():
        if machine.arn not in existing:
            backend.create_state_machine(
                name=machine.name,
                definition=json.dumps(machine.definition),
                roleArn=f"arn:aws:iam::{ctx.d.account}:role/twin-state-machine",
            )


# --- running ------------------------------------------------------------------------------------


def _run(ctx: Context, execution_input: Any, name: str | None = None,
         machine: Machine | None = None, fault: bool = True) -> ExecutionResult:  # fmt: skip
    machine = machine or ctx.main
    result = execute(
        ctx.emu, ctx.d, execution_input, name or _execution_name(), ctx.logdir,
        env_overrides=ctx.env_overrides, throttled_calls_per_function=ctx.throttled,
        wait_ms=ctx.opts.wait_ms, faults=ctx.state_faults if fault else None, machine=machine,
    )  # fmt: skip
    _record_in_moto(ctx, result)
    return result


def _record_in_moto(ctx: Context, result: ExecutionResult) -> None:
    """An execution started through moto (StartExecution) ends as the runner says."""
    backend = stepfunctions_backends[ctx.d.account][ctx.d.region]
    for sm in backend.state_machines:
        for execution in sm.executions:
            if execution.execution_arn == result.execution_arn:
                execution.status = result.status
                execution.output = json.dumps(result.output)


def _dispatch(ctx: Context, target: dict[str, Any], target_input: Any) -> dict[str, Any]:
    """Deliver one event to one rule target as EventBridge does: a state machine target is
    StartExecution (lands in moto; run by the caller), a function target is invoked."""
    arn = target.get("Arn")
    if arn in ctx.machines:
        started = ctx.emu.boto3_client("stepfunctions").start_execution(
            stateMachineArn=arn, input=json.dumps(target_input)
        )
        return {"target": arn, "kind": "state machine", "executionArn": started["executionArn"]}
    if arn in ctx.d.functions:
        result = invoke_function(
            ctx.emu, ctx.d, arn, target_input, f"invoke-{uuid.uuid4().hex[:8]}", ctx.logdir
        )
        return {
            "target": arn,
            "kind": "function",
            "handler": ctx.d.functions[arn].handler,
            "status": result.status,
            "error": result.error,
            "output": result.output,
        }
    return {"target": arn, "kind": "unsupported", "note": "the twin delivers to Lambda and SFN"}


def _not_run_executions(ctx: Context, machine: Machine, seen: set[str]) -> list[Any]:
    backend = stepfunctions_backends[ctx.d.account][ctx.d.region]
    out = []
    for sm in backend.state_machines:
        if sm.arn != machine.arn:
            continue
        for execution in sm.executions:
            if execution.execution_arn not in seen:
                seen.add(execution.execution_arn)
                out.append(execution)
    return out


def _start_api(ctx: Context) -> ExecutionResult:
    source = ctx.source
    assert source is not None
    execution_input = (
        {"snapshotId": source.snapshot_ids[0]}
        if source.kind == "snapshot"
        else {"imageId": source.image_id, "fastSnapshotRestoreAzs": [FSR_ZONE]}
    )
    return _run(ctx, execution_input)


def _tag_deliveries(ctx: Context, events: list[dict[str, Any]], times: int) -> list[dict[str, Any]]:
    out = []
    for event in events:
        for attempt in range(times):
            for rule, target, target_input in deliveries(
                ctx.d.rules, event, ctx.d.region, ctx.d.account
            ):
                if rule.pattern.get("source") != ["aws.tag"]:
                    continue
                answer = _dispatch(ctx, target, target_input)
                out.append({"delivery": attempt + 1, "rule": rule.logical_id, **answer})
    return out


def _started(answer: dict[str, Any]) -> bool:
    """Whether one delivery started an execution: a state machine target always does; a function
    target (start_from_tag) says so in its answer ({"started": bool, ...})."""
    if answer["kind"] == "state machine":
        return True
    output = answer.get("output")
    return bool(output.get("started", True)) if isinstance(output, dict) else False


def _start_tag(ctx: Context) -> ExecutionResult:
    """Tag the (still pending) snapshot; deliver the tag event twice to the deployed rules'
    targets; run every execution that landed in Step Functions (there must be one)."""
    source = ctx.source
    assert source is not None
    trigger_key = next(iter(ctx.d.functions.values())).env.get("TRIGGER_TAG_KEY", "compact")
    ctx.emu.state.tag_events.clear()
    ctx.emu.boto3_client("ec2").create_tags(
        Resources=[source.snapshot_ids[0]], Tags=[{"Key": trigger_key, "Value": "true"}]
    )
    events = list(ctx.emu.state.tag_events)
    ctx.emu.state.tag_events.clear()
    # The trigger tag is the user's change; the workflow must change nothing from here on.
    source.fingerprints = _fingerprints(ctx.emu, source)
    answers = _tag_deliveries(ctx, events, TAG_DELIVERIES)
    seen: set[str] = set()
    started = _not_run_executions(ctx, ctx.main, seen)
    ctx.trigger = {
        "events": len(events),
        "deliveries": answers,
        "executions_started": len(started),
        "second_delivery_no_op": len(started) == 1
        and not any(_started(a) for a in answers if a["delivery"] > 1),
    }
    for answer in answers:
        ctx.notes.append(
            f"tag event delivery {answer['delivery']} -> {answer['kind']} {answer['target']}: "
            + json.dumps(answer.get("output") or answer.get("executionArn"))[:200]
        )
    if not started:
        raise RuntimeError(f"tagging the snapshot started no execution: {answers}")
    first = started[0]
    result = _run(ctx, json.loads(first.execution_input), name=first.name)
    # Tags the workflow put on its results must not start another compaction.
    later = list(ctx.emu.state.tag_events)
    ctx.emu.state.tag_events.clear()
    _tag_deliveries(ctx, later, 1)
    ctx.trigger["retriggered_executions"] = len(_not_run_executions(ctx, ctx.main, seen))
    return result


def _bad_input_cases(ctx: Context) -> list[tuple[str, Any, str]]:
    """(case, execution input, the error the workflow must fail with): twin/bad_inputs.py."""
    source = ctx.source
    assert source is not None
    return bad_inputs.cases(ctx.emu, source.disks[0].path)


def _start_bad_inputs(ctx: Context) -> list[dict[str, Any]]:
    emu = ctx.emu
    cases: list[dict[str, Any]] = []
    for case, bad_input, expected in _bad_input_cases(ctx):
        launched_before = len(emu.state.instances_launched)
        volumes_before = len(emu.state.volume_files)
        case_result = _run(ctx, bad_input)
        case_cleanup = _cleanup_path(ctx, case_result)
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
                "cleanup": [c["status"] for c in case_cleanup],
                "leaked_resources": len(case_leaks),
                "created_nothing": len(emu.state.instances_launched) == launched_before
                and len(emu.state.volume_files) <= volumes_before
                and not case_leaks,
            }
        )
    return cases


# --- the cleanup path ---------------------------------------------------------------------------


def _cleanup_path(ctx: Context, result: ExecutionResult) -> list[dict[str, Any]]:
    """After FAILED, TIMED_OUT or ABORTED: the "Execution Status Change" event, matched against
    the deployed rules, each target run as EventBridge would start it (a state machine target
    with the runner, a function target invoked)."""
    if result.status not in END_STATUSES_CLEANED:
        return []
    event = status_change_event(
        ctx.d.region, ctx.d.account, result.execution_arn, result.state_machine_arn,
        result.name, result.status, result.input,
    )  # fmt: skip
    runs = []
    for rule, target, target_input in deliveries(ctx.d.rules, event, ctx.d.region, ctx.d.account):
        arn = target.get("Arn")
        entry: dict[str, Any] = {"rule": rule.logical_id, "target": arn, "input": target_input}
        if arn in ctx.machines:
            cleanup = _run(ctx, target_input, name=f"cleanup-{uuid.uuid4().hex[:8]}",
                           machine=ctx.machines[arn], fault=False)  # fmt: skip
            entry.update(kind="state machine", name=cleanup.name, status=cleanup.status,
                         error=cleanup.error, cause=cleanup.cause, output=cleanup.output,
                         states_visited=cleanup.states_visited)  # fmt: skip
        else:
            entry.update(_dispatch(ctx, target, target_input))
        runs.append(entry)
    return runs


# --- what exists at the end ---------------------------------------------------------------------


def _tags(emu: Emulator, resource_id: str) -> dict[str, str]:
    return dict(emu.ec2.tags.get(resource_id, {}))


def _leaks(emu: Emulator, name: str, keep_snapshots: set[str], keep_image: str | None) -> list[str]:
    """What is left that should not be, read from the emulator's model (tag-filtered Describe*
    calls lag on purpose: the check must not)."""
    ec2 = emu.ec2
    leaks = []
    for reservation in ec2.all_reservations():
        for inst in reservation.instances:
            if inst.state != "terminated":
                leaks.append(f"instance {inst.id} ({inst.state})")
    # The workflow is the only creator of volumes here: every volume left over is a leak.
    leaks += [f"volume {vid}" for vid in ec2.volumes]
    for sid in emu.state.snapshots_created:
        mine = _tags(emu, sid).get(EXECUTION_TAG, name) == name
        if sid in ec2.snapshots and sid not in keep_snapshots and mine:
            leaks.append(f"snapshot {sid}")
    for image_id in emu.state.images_created:
        if (
            image_id in ec2.amis
            and image_id != keep_image
            and _tags(emu, image_id).get(EXECUTION_TAG)
        ):
            leaks.append(f"image {image_id}")
    leaks += [f"loop device {dev}" for dev in emu.state.loops.attached]
    # Objects in the stack's buckets (the source-blocks lists): teardown deletes an execution's
    # objects on every path, so after the run (and its cleanup path) none may be left.
    leaks += [f"{OBJECT_LEAK}{url}" for url in objects_left(emu.account)]
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


@dataclass
class Facts:
    outputs: list[dict[str, Any]]
    new_snapshot_ids: list[str]
    existing: list[str]
    delivered: bool
    new_image_id: str | None
    new_image_existing: bool
    leaks: list[str]
    outcome: str | None


def _facts(ctx: Context, result: ExecutionResult) -> Facts:
    emu = ctx.emu
    outputs, reported_image = _outputs(result)
    new_ids = list(emu.state.snapshots_created)
    for v in outputs:
        if v.get("newSnapshotId") and v["newSnapshotId"] not in new_ids:
            new_ids.append(v["newSnapshotId"])
    existing = [sid for sid in new_ids if sid in emu.ec2.snapshots]
    tagged_delivered = {sid for sid in existing if _tags(emu, sid).get(DELIVERED_TAG) == "true"}
    delivered = DELIVERED_STATE in result.states_visited or bool(tagged_delivered)
    source_image = ctx.source.image_id if ctx.source else None
    images = [i for i in emu.state.images_created if i != source_image]
    new_image = reported_image or (images[-1] if images else None)
    image_existing = new_image is not None and new_image in emu.ec2.amis
    keep = {v["newSnapshotId"] for v in outputs if v.get("newSnapshotId")} | tagged_delivered
    if delivered:
        keep |= set(existing)
    keep_image = new_image if (delivered or reported_image) else None
    leaks = _leaks(emu, result.name, keep, keep_image)
    outcome = _outcome(result)
    return Facts(outputs, new_ids, existing, delivered, new_image, image_existing, leaks, outcome)


def _outcome(result: ExecutionResult) -> str | None:
    for candidate in (result.output, result.workflow_report):
        if isinstance(candidate, dict) and candidate.get("outcome"):
            return str(candidate["outcome"])
    return None


def holds(row: dict[str, Any]) -> bool:
    """The invariants of every case: nothing leaked, every AWS call allowed by the synthesized
    roles, the source untouched, and once delivered
    the new snapshots (and the AMI, if one was registered) still exist."""
    if row["leaked_resources"] or row.get("iam_denials"):
        return False
    if not row["source_snapshot_unchanged"]:
        return False
    if row["delivered"]:
        if (
            row["new_snapshots_existing"] < len(row["new_snapshot_ids"])
            or not row["new_snapshot_ids"]
        ):
            return False
        if row.get("new_image_id") and not row["new_image_existing"]:
            return False
    return True


# --- checks, report -----------------------------------------------------------------------------


Panel = tuple[str, set[int], int]


def _verification(
    ctx: Context, outputs: list[dict[str, Any]], source_chunks: dict[str, int]
) -> tuple[list[dict[str, Any]], int, list[Panel]]:
    emu, source = ctx.emu, ctx.source
    assert source is not None
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
            checked = verify(source.disks[index], new_file, ctx.work / f"verify-{index}")
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
    return verification, new_chunks_total, panels


def _ami_check(emu: Emulator, source: Source, image_id: str | None) -> dict[str, Any]:
    if source.image_id is None:
        return {}
    ec2 = emu.boto3_client("ec2")
    check: dict[str, Any] = {"new_image_id": image_id, "attributes_equal": False, "fsr": []}
    if image_id is None or image_id not in emu.ec2.amis:
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


def run(opts: Options) -> dict[str, Any]:
    opts.validate()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="twin-demo-"))
    logdir = opts.out_dir / "logs"
    shutil.rmtree(logdir, ignore_errors=True)
    fault = parse(opts.fault)
    try:
        with Emulator(work / "emulator", Faults.of(fault)) as emu:
            ctx = _setup(emu, opts, fault, work, logdir)
            return _run_in(ctx, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_in(ctx: Context, started: float) -> dict[str, Any]:
    emu, opts, source = ctx.emu, ctx.opts, ctx.source
    assert source is not None
    source.fingerprints = _fingerprints(emu, source)
    source_chunks = {
        sid: len(written_chunks(emu.snapshot_file(sid))) for sid in source.snapshot_ids
    }
    cases: list[dict[str, Any]] = []
    result: ExecutionResult | None = None
    cleanup: list[dict[str, Any]] = []
    if ctx.fault == "bad-input":
        cases = _start_bad_inputs(ctx)
    elif opts.trigger == "tag":
        result = _start_tag(ctx)
    else:
        result = _start_api(ctx)
    if result is not None:
        cleanup = _cleanup_path(ctx, result)
    facts = _facts(ctx, result) if result is not None else None
    leaks = list(facts.leaks) if facts else []
    leaks += [
        f"{c['case']}: {c['leaked_resources']} resources" for c in cases if c["leaked_resources"]
    ]
    unchanged = _fingerprints(emu, source) == source.fingerprints
    outputs = facts.outputs if facts else []
    verification, new_chunks_total, panels = _verification(ctx, outputs, source_chunks)
    primary = result
    report: dict[str, Any] = {
        "scenario": {
            "fs": opts.fs,
            "input": opts.input,
            "trigger": opts.trigger,
            "fault": fault_label(ctx.fault),
        },
        "fault": fault_label(ctx.fault),
        "fault_applied": _fault_applied(ctx, primary),
        "faults_applied": _faults_applied(ctx, primary),
        "execution_name": primary.name if primary else None,
        "execution_input": primary.input if primary else None,
        "execution_status": primary.status if primary else _cases_status(cases),
        "error": primary.error if primary else None,
        "cause": primary.cause if primary else None,
        "outcome": facts.outcome if facts else None,
        "delivered": facts.delivered if facts else False,
        "cleanup": cleanup[0]["status"] if cleanup and "status" in cleanup[0] else None,
        "cleanup_runs": cleanup,
        "states_visited": primary.states_visited if primary else [],
        "state_durations": primary.state_seconds if primary else [],
        "phase_seconds": (primary.workflow_report or {}).get("phaseSeconds") if primary else None,
        "source_snapshot_ids": source.snapshot_ids,
        "source_image_id": source.image_id,
        "source_snapshot_chunks": sum(source_chunks.values()),
        "source_snapshot_bytes": sum(source_chunks.values()) * EBS_BLOCK,
        "new_snapshot_ids": facts.new_snapshot_ids if facts else [],
        "new_snapshots_existing": len(facts.existing) if facts else 0,
        "new_snapshot_ids_existing": facts.existing if facts else [],
        "new_image_id": facts.new_image_id if facts else None,
        "new_image_existing": facts.new_image_existing if facts else False,
        "new_snapshot_chunks": new_chunks_total,
        "new_snapshot_bytes": new_chunks_total * EBS_BLOCK,
        "bytes_read_from_source": sum(int(v.get("sourceBytesRead") or 0) for v in outputs),
        "bytes_written_to_target": sum(int(v.get("targetBytesWritten") or 0) for v in outputs),
        "files_verified": bool(verification) and all(v["files_verified"] for v in verification),
        "fsck_clean": bool(verification) and all(v["fsck_clean"] for v in verification),
        "verification": verification,
        "leaked_resources": len(leaks),
        # S3 objects among them (counted in leaked_resources too)
        "leaked_objects": sum(1 for leak in leaks if leak.startswith(OBJECT_LEAK)),
        "leaks": leaks,
        "source_snapshot_unchanged": unchanged,
        "instances_launched": len(emu.state.instances_launched),
        "lambda_invocations": len(primary.invocations) if primary else 0,
        "throttled_invocations": sum(
            1
            for i in (primary.invocations if primary else [])
            if i["error"] == "Lambda.TooManyRequestsException"
        ),
        "throttled_requests": dict(emu.state.throttled_served),
        "handlers_called": _handlers_called(ctx.d, primary) if primary else [],
        "spot_capacity_errors": emu.state.spot_failures_served,
        "harsh": {
            "tag_filtered_answers_lagging": emu.state.tag_lag_hidden,
            "snapshot_in_use_answers": emu.state.snapshot_in_use_served,
        },
        "trigger": ctx.trigger,
        "retriggered_executions": ctx.trigger.get("retriggered_executions", 0),
        "image": _ami_check(emu, source, facts.new_image_id if facts else None),
        "bad_input_cases": cases,
        "workflow_report": primary.workflow_report if primary else None,
        "notes": ctx.notes,
        "transfer_instances": _transfer_instances(emu),
        # every call the Lambdas made, checked against the synthesized roles (conditions included)
        "iam_denials": [str(denial) for denial in check_calls(emu.calls_path, ctx.d)],
        "twin_seconds": round(time.monotonic() - started, 1),
    }
    report["holds"] = (
        holds(report) if primary else not leaks and unchanged and not report["iam_denials"]
    )
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    picture = opts.out_dir / "blocks.svg"
    if opts.picture:
        picture.write_text(block_picture(panels))
    report["picture"] = str(picture)
    (opts.out_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def _transfer_instances(emu: Emulator) -> list[dict[str, Any]]:
    """Which disk each transfer instance booted from (emulator/boot.py): its own root, or a
    volume present at launch that carries its AMI's root filesystem UUID."""
    out = []
    for reservation in emu.ec2.all_reservations():
        for instance in reservation.instances:
            disk = boot_disk(instance)
            out.append(
                {
                    "instanceId": instance.id,
                    "bootedFrom": "own root volume" if disk is None else disk.volume_id,
                }
            )
    return out


def _faults_applied(ctx: Context, result: ExecutionResult | None) -> list[dict[str, Any]]:
    """Per KIND@STATE fault of the run: [{fault, applied, detail}], in the order given."""
    out = []
    for applied in result.faults if result is not None else []:
        fault = StateFault(applied["kind"], applied["state"])
        detail = applied.get("detail")
        if fault.kind == "throttle" and applied.get("applied"):
            served = ctx.emu.state.throttled_served.get(fault.state, 0)
            detail = f"{served} AWS requests of this state answered with throttling errors"
        out.append({"fault": str(fault), "applied": bool(applied.get("applied")), "detail": detail})
    return out


def _fault_applied(ctx: Context, result: ExecutionResult | None) -> dict[str, Any] | None:
    """The single-fault shape: {kind, state, applied, detail} for one fault; for several,
    {fault, applied (all of them), detail (each one's)}; None without a KIND@STATE fault."""
    each = _faults_applied(ctx, result)
    if not each:
        return None
    if len(each) == 1:
        kind, _, state = each[0]["fault"].partition("@")
        return {"kind": kind, "state": state, "applied": each[0]["applied"],
                "detail": each[0]["detail"]}  # fmt: skip
    return {
        "fault": "+".join(f["fault"] for f in each),
        "applied": all(f["applied"] for f in each),
        "detail": "; ".join(f"{f['fault']}: {f['detail'] or 'never reached'}" for f in each),
    }


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


__all__ = ["FAULTS", "FaultError", "Options", "fault_label", "holds", "run"]
