"""SSM behaviour moto lacks: managed-instance information, and Run Command that really runs.

SendCommand of a Command document with an aws:runShellScript step runs the step's script on this
machine in a background thread, with the parameters substituted the way the SSM agent does
(`{{ Name }}`), against loop devices that stand in for the instance's EBS volumes.
GetCommandInvocation then answers like SSM: InvocationDoesNotExist right after SendCommand, then
Pending/InProgress (no output yet), then Success/Failed/TimedOut with the (cut) output; with
CloudWatchOutputConfig the whole output streams to CloudWatch Logs meanwhile (command_logs.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.models import ec2_backends
from moto.ssm.exceptions import SSMException as RESTError
from moto.ssm.models import Command, SimpleSystemManagerBackend
from moto.ssm.responses import SimpleSystemManagerResponse

from ..iam.recorder import INSTANCE_CALLER
from . import command_logs, instance_metadata, patching, replay
from . import state as st
from .command_runs import CommandRun, kill, now
from .ec2_twin import boot_disk, interrupt_spot_instance
from .ec2_volumes import volume_path
from .ssm_documents import document_content, render_script

NVME_PREFIX = "nvme-Amazon_Elastic_Block_Store_"
# With the instance-lost fault, the instance disappears this long after its command started.
INTERRUPT_AFTER_SECONDS = 0.5

_orig: dict[str, Any] = {}


# --- running -----------------------------------------------------------------------------


def _attached_volumes(backend: Any, instance_id: str) -> list[tuple[str, bool]]:
    """(volume id, whether it is the instance's own root volume) of each attached volume."""
    instance = backend.get_instance(instance_id)
    return [
        (mapping.volume_id, device == instance.root_device_name)
        for device, mapping in instance.get_block_device_mapping
    ]


def _prepare_devices(emu: st.EmulatorState, run: CommandRun, backend: Any) -> Path:
    """Loop devices for the instance's volumes and the by-id directory the program looks in."""
    by_id = run.rundir / "by-id"
    by_id.mkdir(parents=True, exist_ok=True)
    first_instance = emu.instances_launched[:1] == [run.instance_id]
    for volume_id, own_root in _attached_volumes(backend, run.instance_id):
        volume = backend.get_volume(volume_id)
        if emu.faults.hide_source_device and first_instance and volume.snapshot_id:
            continue  # command-fails: the source volume never shows up as a device
        # The instance's own root volume is not read in the twin (its OS does not run from it):
        # its backing file as is, without the fill an encrypted volume gets before it is read
        # (encryption.py), which for a root of tens of GiB would take minutes.
        path = emu.volume_files[volume_id] if own_root else volume_path(emu, volume_id)
        device = emu.loops.attach(path)
        run.devices.append(device)
        (by_id / (NVME_PREFIX + volume_id.replace("-", ""))).symlink_to(device)
        booted = boot_disk(backend.get_instance(run.instance_id))
        if booted is not None and booted.volume_id == volume_id:
            _mount_instance_root(emu, run, device, booted)
    return by_id


# mount options of a root filesystem mounted read-only without touching its journal/log
_RO_OPTIONS = {"ext4": "ro,noload", "xfs": "ro,norecovery,nouuid"}


def _mount_instance_root(emu: st.EmulatorState, run: CommandRun, device: str, booted: Any) -> None:
    """The instance booted from this volume: its root filesystem is the instance's /, mounted
    (here read-only, under the run's directory) for as long as the instance runs the command.
    The partition is an offset loop device over the volume's device, as this kernel shows
    partitions, so programs see the volume in use."""
    fs = booted.filesystem
    partition = emu.loops.attach(Path(device), fs.offset, fs.size, read_only=True)
    mountpoint = run.rundir / "instance-root"
    mountpoint.mkdir(exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", fs.fstype, "-o", _RO_OPTIONS[fs.fstype], partition, str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        emu.loops.detach(partition)
        raise RuntimeError(f"mounting the instance's root {partition}: {result.stderr.strip()}")
    run.root_mount = (partition, mountpoint)


def _unmount_instance_root(emu: st.EmulatorState, run: CommandRun) -> None:
    if run.root_mount is None:
        return
    partition, mountpoint = run.root_mount
    for attempt in range(20):
        result = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True)
        if result.returncode == 0 or "not mounted" in result.stderr:
            break
        time.sleep(0.05 * (attempt + 1))
    else:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
    with contextlib.suppress(RuntimeError, ValueError):
        emu.loops.detach(partition)
    run.root_mount = None


def _prepare_files(emu: st.EmulatorState, run: CommandRun, backend: Any) -> tuple[Path, Path]:
    """Diskless (replay.py): the by-id links point at the volumes' backing files, and each
    source volume's recorded plan is written for the replayed program. (by-id dir, plan file)"""
    by_id = run.rundir / "by-id"
    by_id.mkdir(parents=True, exist_ok=True)
    first_instance = emu.instances_launched[:1] == [run.instance_id]
    plans = {}
    for volume_id, own_root in _attached_volumes(backend, run.instance_id):
        volume = backend.get_volume(volume_id)
        if emu.faults.hide_source_device and first_instance and volume.snapshot_id:
            continue  # command-fails: the source volume never shows up as a device
        # as _prepare_devices: the own root's backing file as is
        path = emu.volume_files[volume_id] if own_root else volume_path(emu, volume_id)
        (by_id / (NVME_PREFIX + volume_id.replace("-", ""))).symlink_to(path)
        plan = replay.plan_for(emu.replay_sources, volume.snapshot_id, run.target)
        if plan is not None:
            plans[str(path.resolve())] = plan
    return by_id, replay.write_plans(run.rundir, plans)


def _release_devices(emu: st.EmulatorState, run: CommandRun) -> None:
    _unmount_instance_root(emu, run)
    emu.loops.release_stacked(run.devices)
    for device in run.devices:
        # On failure detach_all at shutdown tries again and reports what stays attached.
        with contextlib.suppress(RuntimeError, ValueError):
            emu.loops.detach(device)
    run.devices.clear()


def instance_env(emu: st.EmulatorState, instance_id: str) -> dict[str, str]:
    """What the instance's programs find of its role: the twin has no instance metadata service,
    so the role's session credentials come as the environment credentials the data plane reads
    first (sparsecopy/credentials.py), with the region and the EBS endpoint (the emulator). The
    access key is the instance's own (an instance profile's session is per instance); the IAM
    recorder attributes every request signed with it to the instance role (INSTANCE_CALLER), so
    the check judges the instance's EBS direct calls by the synthesized instance role, with the
    instance's ARN as ec2:SourceInstanceArn."""
    if emu.faults.ebs_credentials_seconds:
        # FAULT=credentials-near-expiry: short-lived role credentials from instance metadata
        return {
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": instance_metadata.endpoint(emu, instance_id),
            "AWS_REGION": emu.region,
            "AWS_ENDPOINT_URL_EBS": emu.endpoint,
        }
    digest = hashlib.sha256(f"instance-role:{instance_id}".encode()).digest()
    key = "ASIATWIN" + base64.b32encode(digest).decode()[:12]
    with emu.lock:
        emu.access_keys[key] = INSTANCE_CALLER
        emu.instance_keys[key] = instance_id
    return {
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": "twin-instance-role-secret",
        "AWS_SESSION_TOKEN": f"twin-instance-role-session-{instance_id}",
        "AWS_REGION": emu.region,
        "AWS_ENDPOINT_URL_EBS": emu.endpoint,
    }


def _command_env(emu: st.EmulatorState, run: CommandRun, backend: Any) -> dict[str, str]:
    """The command's environment, its devices prepared (loop devices, or diskless the files)."""
    path = os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    env = {"HOME": "/root", "LANG": "C.UTF-8", **instance_env(emu, run.instance_id)}
    if emu.diskless:
        by_id, plans = _prepare_files(emu, run, backend)
        env.update(replay.environment(run.rundir, path, plans))
    else:
        by_id = _prepare_devices(emu, run, backend)
        env["PATH"] = path
    env["SPARSECOPY_BY_ID_DIR"] = str(by_id)
    return env


def _execute(emu: st.EmulatorState, run: CommandRun, backend: Any) -> None:
    final: str | None = None
    try:
        env = _command_env(emu, run, backend)
        script = run.rundir / "_script.sh"
        script.write_text(run.script)
        if "SPARSECOPY_PROGRESS_SECONDS" in os.environ:  # a test asks for more progress lines
            env["SPARSECOPY_PROGRESS_SECONDS"] = os.environ["SPARSECOPY_PROGRESS_SECONDS"]
        run.started = now()
        run.status = "InProgress"
        run.process = subprocess.Popen(
            ["bash", str(script)],
            cwd=run.rundir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so a lost instance can take the whole process group down
        )
        interrupt = emu.faults.interrupt_first_instance and emu.instances_launched[:1] == [
            run.instance_id
        ]
        if interrupt:
            # Synchronously, so the instance is gone before this run can report an end, however
            # fast the command is.
            time.sleep(INTERRUPT_AFTER_SECONDS)
            interrupt_spot_instance(backend, run.instance_id)
        _wait(run)
        _stop_logs(run)  # the agent uploads the last output before it reports the end
        if run.instance_gone:
            # The agent died with the instance: nobody reports an end.
            return
        run.ended = now()
        run.response_code = run.process.returncode
        if run.status != "TimedOut":
            final = "Success" if run.response_code == 0 else "Failed"
    except Exception as error:  # the agent reports its own failures as a failed invocation
        run.ended = now()
        run.stderr += f"\ntwin: could not run the command: {error}\n"
        final = "Failed"
        run.response_code = 1
    finally:
        _stop_logs(run)
        _release_devices(emu, run)
        _keep_output(emu, run)
        # Reported last: whoever sees the end finds the run's devices released and its output
        # kept (a test saw a Success while its loop device was still attached).
        if final is not None:
            run.status = final


def _wait(run: CommandRun) -> None:
    """Until the plugin ends (or its timeout): both outputs read as they are written, kept for
    the invocation and, with CloudWatchOutputConfig, uploaded in batches as the agent does."""
    assert run.process is not None and run.process.stdout and run.process.stderr
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=command_logs.pump, args=(pipe, name, keep, run.logs), daemon=True)
        for pipe, name, keep in (
            (run.process.stdout, "stdout", out),
            (run.process.stderr, "stderr", err),
        )
    ]
    for reader in readers:
        reader.start()
    if run.logs is not None:
        run.log_shipper = command_logs.shipper(run.logs)
    try:
        run.process.wait(timeout=run.timeout_seconds)
    except subprocess.TimeoutExpired:
        kill(run)
        run.process.wait()
        run.status = "TimedOut"
    for reader in readers:
        reader.join()
    run.stdout, run.stderr = "".join(out), "".join(err)


def _stop_logs(run: CommandRun) -> None:
    """The last batch goes up when the plugin ends; an agent that died with its instance sends
    nothing more."""
    if run.logs is None or run.logs.stop.is_set():
        return
    if run.instance_gone:
        with run.logs.lock:
            run.logs.pending.clear()
    run.logs.stop.set()
    if run.log_shipper is not None:
        run.log_shipper.join(timeout=30)


def _keep_output(emu: st.EmulatorState, run: CommandRun) -> None:
    if emu.command_log_dir is None:
        return
    emu.command_log_dir.mkdir(parents=True, exist_ok=True)
    stem = emu.command_log_dir / f"{run.command_id}-{run.instance_id}"
    stem.with_suffix(".stdout").write_text(run.stdout)
    stem.with_suffix(".stderr").write_text(run.stderr)


# --- patched API -----------------------------------------------------------------------------


def _send_command(self: SimpleSystemManagerBackend, **kwargs: Any) -> Command:
    emu = st.ACTIVE
    name = kwargs.get("document_name") or ""
    document = document_content(self, name) if emu is not None else None
    if emu is not None and document is None and not name.startswith("AWS-"):
        raise RESTError("InvalidDocument", f"Document {name} does not exist")
    script_timeout = None
    if document is not None:
        script, script_timeout = render_script(document, kwargs.get("parameters") or {})
    command = _orig["send_command"](self, **kwargs)
    if emu is None or document is None:
        return command
    backend = ec2_backends[self.account_id][self.region_name]
    for instance_id in command.instance_ids:
        step = str((document.get("mainSteps") or [{}])[0].get("name") or "aws:runShellScript")
        run = CommandRun(
            command_id=command.command_id,
            instance_id=instance_id,
            document_name=name,
            script=script,
            timeout_seconds=script_timeout or 3600,
            rundir=emu.workdir / "commands" / command.command_id / instance_id,
        )
        run.plugin_name = step
        run.target = _parameter(document, kwargs.get("parameters") or {}, "Target") or "volume"
        run.logs = command_logs.from_request(
            _CLOUDWATCH.config,
            self.account_id,
            self.region_name,
            f"{command.command_id}/{instance_id}/{command_logs.step_stream_name(step)}",
            name,
        )
        run.rundir.mkdir(parents=True, exist_ok=True)
        with emu.lock:
            emu.runs[(command.command_id, instance_id)] = run
        run.thread = threading.Thread(target=_execute, args=(emu, run, backend), daemon=True)
        run.thread.start()
    command.status = "InProgress"
    return command


def _parameter(document: dict[str, Any], given: dict[str, Any], name: str) -> str | None:
    """A parameter's value as the agent substitutes it: the one given, else the default."""
    values = given.get(name)
    if values:
        return str(values[0])
    default = ((document.get("parameters") or {}).get(name) or {}).get("default")
    return None if default is None else str(default)


class _RequestConfig(threading.local):
    config: Any = None


# SendCommand's CloudWatchOutputConfig, which moto's backend does not take: the response handler
# keeps it here (per server thread) for _send_command.
_CLOUDWATCH = _RequestConfig()


def _send_command_response(self: SimpleSystemManagerResponse) -> ActionResult:
    _CLOUDWATCH.config = self._get_param("CloudWatchOutputConfig")
    try:
        return _orig["send_command_response"](self)  # type: ignore[no-any-return]
    finally:
        _CLOUDWATCH.config = None


def _get_invocation(self: Command, instance_id: str, plugin_name: str | None) -> dict[str, Any]:
    emu = st.ACTIVE
    run = emu.runs.get((self.command_id, instance_id)) if emu is not None else None
    if run is None:
        return _orig["get_invocation"](self, instance_id, plugin_name)  # type: ignore[no-any-return]
    run.polls += 1
    if run.polls == 1:
        # SSM needs a moment before an invocation exists; clients must tolerate this.
        raise RESTError(
            "InvocationDoesNotExist",
            "An error occurred (InvocationDoesNotExist) when calling the "
            "GetCommandInvocation operation",
        )
    if plugin_name not in (None, run.plugin_name):
        raise RESTError("InvalidPluginName", f"plugin {plugin_name} is not in the document")
    self.status = run.status
    return run.invocation()


def _describe_instance_information(self: SimpleSystemManagerResponse) -> ActionResult:
    wanted: set[str] = set()
    for item in self._get_param("InstanceInformationFilterList", []) or []:
        if item.get("key") == "InstanceIds":
            wanted.update(item.get("valueSet", []))
    for item in self._get_param("Filters", []) or []:
        if item.get("Key") in ("InstanceIds", "InstanceId"):
            wanted.update(item.get("Values", []))
    backend = ec2_backends[self.current_account][self.region]
    emu = st.ACTIVE
    items = []
    for reservation in backend.all_reservations():
        for instance in reservation.instances:
            if wanted and instance.id not in wanted:
                continue
            if instance.state != "running":
                continue
            if emu is not None:
                with emu.lock:
                    polls = emu.instance_info_polls.get(instance.id, 0) + 1
                    emu.instance_info_polls[instance.id] = polls
                if polls <= st.INSTANCE_INFO_MISSING_POLLS:
                    continue  # the agent has not registered yet
            items.append(
                {
                    "InstanceId": instance.id,
                    "PingStatus": "Online",
                    "LastPingDateTime": now(),
                    "AgentVersion": "3.3.0.0",
                    "IsLatestVersion": True,
                    "PlatformType": "Linux",
                    "PlatformName": "Amazon Linux",
                    "PlatformVersion": "2023",
                    "ResourceType": "EC2Instance",
                    "IPAddress": instance.private_ip,
                    "ComputerName": instance.private_dns_name,
                }
            )
    return ActionResult({"InstanceInformationList": items})


def install() -> None:
    patching.install(
        _orig,
        {
            "send_command": (SimpleSystemManagerBackend, "send_command", _send_command),
            "get_invocation": (Command, "get_invocation", _get_invocation),
            "send_command_response": (
                SimpleSystemManagerResponse,
                "send_command",
                _send_command_response,
            ),
            "describe_instance_information": (
                SimpleSystemManagerResponse,
                "describe_instance_information",
                _describe_instance_information,
            ),
        },
    )
