"""Checks the recorded calls of a twin run against the synthesized roles (conditions included).

    denials = check_calls(emu.calls_path, deployment)   # [] when every call would be allowed

Each recorded call's authorizations (resolve.py), plus what RunInstances with the stack's launch
template implies (iam:PassRole of the instance profile's role, ssm:GetParameters of its resolve:ssm:
image), go through @cloud-copilot/iam-simulate (check.mjs) with the policies of the caller's
role (a function's, or the launch template's instance role for the transfer instance's own
calls, recorder.INSTANCE_CALLER) as the template gives them (inline, AWS::IAM::Policy,
AWS::IAM::ManagedPolicy and AWS managed policies), with
the twin's physical names and ARNs substituted (twin/cfn.py). An S3 call on a bucket of the stack is
also judged against the bucket's policy (AWS::S3::BucketPolicy) as its resource policy: an explicit
deny there (enforce-SSL, say) denies the call.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..cfn import Deployment, Resolver, load_template, resources_of
from . import resolve, usage
from .recorder import INSTANCE_CALLER, STATE_MACHINE_CALLER

REPO = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).with_name("check.mjs")

Policies = dict[str, list[dict[str, Any]]]
HANDLERS = "compactor.handlers."


@dataclass
class Denial:
    caller: str
    call: str  # the recorded API call, e.g. ec2:RunInstances
    action: str  # the IAM action authorized, e.g. ec2:CreateTags for RunInstances' tags
    resource: str
    decision: str  # ImplicitlyDenied, ExplicitlyDenied, Error (unmodelled or invalid)
    reason: str

    def __str__(self) -> str:
        what = self.call if self.call == self.action else f"{self.call} ({self.action})"
        return f"{self.caller}: {what} on {self.resource}: {self.decision} {self.reason}".rstrip()


class _IamResolver(Resolver):
    """twin/cfn.py's resolver with real IAM role ARNs (iam:PassRole is matched against them)."""

    def get_att(self, name: str, attr: str) -> object:
        resource = self.resources.get(name, {})
        if attr == "Arn" and resource.get("Type") == "AWS::IAM::Role":
            return f"arn:aws:iam::{self.d.account}:role/{self.d.stack_name}-{name}"
        return super().get_att(name, attr)


def without_action(action: str) -> Callable[[Policies], None]:
    """An `edit_policies` for check_calls that takes `action` out of every statement (a statement
    left empty keeps a harmless Describe): what a run would be denied without that grant."""

    def edit(policies: Policies) -> None:
        for entries in policies.values():
            for entry in entries:
                for statement in entry.get("policy", {}).get("Statement", []):
                    actions = statement["Action"]
                    actions = actions if isinstance(actions, list) else [actions]
                    statement["Action"] = [a for a in actions if a != action] or [
                        "ec2:DescribeRegions"
                    ]

    return edit


def _cdk_out(deployment: Deployment) -> Path:
    for fn in deployment.functions.values():
        for candidate in (fn.code_dir.parent, fn.code_dir.parent.parent):
            if (candidate / "manifest.json").exists():
                return candidate
    raise FileNotFoundError("cannot find the cloud assembly of the deployment; pass cdk_out")


def _ref_name(node: Any) -> str | None:
    if isinstance(node, dict) and "Ref" in node:
        return str(node["Ref"])
    if isinstance(node, dict) and "Fn::GetAtt" in node:
        arg = node["Fn::GetAtt"]
        return str(arg[0] if isinstance(arg, list) else arg.split(".")[0])
    return None


def role_policies(template: dict[str, Any], r: Resolver) -> dict[str, list[dict[str, Any]]]:
    """Role logical id -> its policies ({name, policy} or {name, managed}), intrinsics resolved."""
    out: dict[str, list[dict[str, Any]]] = {}
    for logical, role in resources_of(template, "AWS::IAM::Role").items():
        props = role["Properties"]
        entries = [
            {"name": p["PolicyName"], "policy": r.resolve(p["PolicyDocument"])}
            for p in props.get("Policies", [])
        ]
        for arn in r.resolve(props.get("ManagedPolicyArns", [])):
            if ":iam::aws:policy/" in arn:
                entries.append({"name": arn, "managed": arn.rsplit("/", 1)[-1]})
        out[logical] = entries
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for logical, policy in resources_of(template, kind).items():
            props = policy["Properties"]
            for role in props.get("Roles", []):
                name = _ref_name(role)
                if name in out:
                    out[name].append(
                        {"name": logical, "policy": r.resolve(props["PolicyDocument"])}
                    )
    return out


def instance_role(template: dict[str, Any]) -> str | None:
    """The logical id of the role of the launch template's instance profile (the transfer
    instance's role), None without one."""
    for lt in resources_of(template, "AWS::EC2::LaunchTemplate").values():
        profile = _ref_name(
            lt["Properties"]["LaunchTemplateData"].get("IamInstanceProfile", {}).get("Arn")
        )
        if profile:
            return _ref_name(template["Resources"][profile]["Properties"]["Roles"][0])
    return None


def _launch_template_extras(
    template: dict[str, Any], r: Resolver, region: str
) -> tuple[str | None, str | None]:
    """(instance role ARN, AMI parameter ARN) of the stack's launch template."""
    role_arn = parameter_arn = None
    for lt in resources_of(template, "AWS::EC2::LaunchTemplate").values():
        data = lt["Properties"]["LaunchTemplateData"]
        image = str(data.get("ImageId", ""))
        if image.startswith("resolve:ssm:"):
            parameter_arn = (
                f"arn:aws:ssm:{region}::parameter/{image.removeprefix('resolve:ssm:').lstrip('/')}"
            )
        profile = _ref_name(data.get("IamInstanceProfile", {}).get("Arn"))
        if profile:
            roles = template["Resources"][profile]["Properties"]["Roles"]
            role_arn = str(r.resolve({"Fn::GetAtt": [_ref_name(roles[0]), "Arn"]}))
    return role_arn, parameter_arn


def bucket_policies(template: dict[str, Any], r: Resolver) -> dict[str, dict[str, Any]]:
    """Bucket name -> its bucket policy (AWS::S3::BucketPolicy), intrinsics resolved."""
    out: dict[str, dict[str, Any]] = {}
    for policy in resources_of(template, "AWS::S3::BucketPolicy").values():
        props = policy["Properties"]
        out[str(r.resolve(props["Bucket"]))] = r.resolve(props["PolicyDocument"])
    return out


def _bucket_of(resource: str) -> str | None:
    if not resource.startswith("arn:aws:s3:::"):
        return None
    return resource.removeprefix("arn:aws:s3:::").split("/", 1)[0]


def load_calls(recording_path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in Path(recording_path).read_text().splitlines() if line.strip()
    ]


def check_calls(
    recording_path: Path,
    deployment: Deployment,
    *,
    cdk_out: Path | None = None,
    edit_policies: Callable[[Policies], None] | None = None,
    usage_from: str | None = None,
) -> list[Denial]:
    """Every recorded call the caller's role would not allow (and every call that could not be
    modelled). `edit_policies` may change the callers' policies first (tests remove a grant).
    `usage_from` names a run of the stack's real code: which statement of which role allowed its
    calls goes to twin/iam/usage.py (the proof that every statement is used)."""
    _, template = load_template(cdk_out or _cdk_out(deployment))
    r = _IamResolver(template, deployment, params=Resolver.parameter_values(template))
    by_role = role_policies(template, r)
    policies, role_of = _caller_policies(template, deployment, by_role)
    if edit_policies is not None:
        edit_policies(policies)
    denials, used = _judged(recording_path, template, r, deployment, policies, role_of)
    if usage_from is not None and edit_policies is None:
        # the stack's own functions and the instance (CDK's deploy-time providers never run here)
        own = {f.name for f in deployment.functions.values() if f.handler.startswith(HANDLERS)}
        roles = {role: by_role[role] for c, role in role_of.items() if c in own | {INSTANCE_CALLER}}
        usage.record(usage.part(usage_from, roles, used, map(str, denials)))
    return denials


def _judged(
    recording_path: Path,
    template: dict[str, Any],
    r: Resolver,
    deployment: Deployment,
    policies: Policies,
    role_of: dict[str, str],
) -> tuple[list[Denial], dict[str, dict[str, int]]]:
    """The denials of the recorded calls, and the statements that allowed the others: role ->
    statement id -> calls."""
    used: dict[str, dict[str, int]] = {}
    # ssm:GetParameters of the public AMI parameter is not simulated: its ARN has no account, which
    # iam-simulate's ARN validation rejects (stack.test.ts checks that statement statically).
    instance_role, _ = _launch_template_extras(template, r, deployment.region)
    denials, requests, meta = _requests(
        load_calls(recording_path), instance_role, bucket_policies(template, r)
    )
    if not requests:
        return denials, used
    for decision in _simulate(policies, requests):
        if decision["decision"] == "Allowed":
            counts = used.setdefault(role_of[requests[decision["id"]]["caller"]], {})
            for sid in decision.get("matched", []):
                counts[sid] = counts.get(sid, 0) + 1
            continue
        request = requests[decision["id"]]
        caller, call = meta[decision["id"]]
        reason = decision.get("reason") or ""
        if request.get("why"):
            reason = f"({request['why']}) {reason}".strip()
        denials.append(
            Denial(
                caller, call, request["action"], request["resource"], decision["decision"], reason
            )
        )
    return denials, used


def _caller_policies(
    template: dict[str, Any], deployment: Deployment, by_role: Policies
) -> tuple[Policies, dict[str, str]]:
    """Function name -> the policies of its role, INSTANCE_CALLER -> the transfer instance role's,
    and STATE_MACHINE_CALLER + a state machine's name -> its role's (the calls Step Functions
    makes for a startExecution.sync Task, recorded by twin/runner/start_execution.mjs); copies:
    check_calls' caller may edit them; and each caller's role logical id."""
    policies: Policies = {}
    role_of: dict[str, str] = {}
    for fn in deployment.functions.values():
        role = _ref_name(template["Resources"][fn.logical_id]["Properties"].get("Role"))
        if role in by_role:
            policies[fn.name] = copy.deepcopy(by_role[role])
            role_of[fn.name] = role
    instance = instance_role(template)
    if instance in by_role:
        policies[INSTANCE_CALLER] = copy.deepcopy(by_role[instance])
        role_of[INSTANCE_CALLER] = instance
    for logical, machine in resources_of(template, "AWS::StepFunctions::StateMachine").items():
        role = _ref_name(machine["Properties"].get("RoleArn"))
        if role in by_role:
            caller = STATE_MACHINE_CALLER + deployment.arns[logical].rsplit(":", 1)[-1]
            policies[caller] = copy.deepcopy(by_role[role])
            role_of[caller] = role
    return policies, role_of


def _requests(
    calls: list[dict[str, Any]], instance_role: str | None, buckets: dict[str, dict[str, Any]]
) -> tuple[list[Denial], list[dict[str, Any]], list[tuple[str, str]]]:
    """The simulator's requests for the recorded calls (each authorization, with what it implies
    and the bucket policy of an S3 resource), the (caller, call) of each, and a denial for each
    call the recorder could not model."""
    denials: list[Denial] = []
    requests: list[dict[str, Any]] = []
    meta: list[tuple[str, str]] = []
    for entry in calls:
        caller, call = entry["caller"], f"{entry['service']}:{entry['action']}"
        if "unmodelled" in entry:
            denials.append(Denial(caller, call, call, "?", "Error", entry["unmodelled"]))
            continue
        contexts = [resolve.Context(**_ctx_args(c)) for c in entry["contexts"]]
        contexts += resolve.implied(
            contexts, instance_role_arn=instance_role, ami_parameter_arn=None
        )
        for c in contexts:
            request: dict[str, Any] = {"id": len(requests), "caller": caller, **c.as_json()}
            bucket = _bucket_of(c.resource)
            if bucket in buckets:
                request["resourcePolicy"] = buckets[bucket]
            key_policy = _key_policy(c.resource)
            if key_policy is not None:
                request["resourcePolicy"] = key_policy
            requests.append(request)
            meta.append((caller, call))
    return denials, requests, meta


def _key_policy(resource: str) -> dict[str, Any] | None:
    """The key policy of a KMS key the emulator holds (KMS needs its key policy to allow a call,
    as a bucket policy can for S3: iam-simulate denies a key without one). A key the emulator
    does not hold (another account's) has none here, and the call is denied."""
    parts = resource.split(":", 5)
    if len(parts) < 6 or parts[2] != "kms" or not parts[5].startswith("key/"):
        return None
    from moto.kms.models import kms_backends

    backend = kms_backends[parts[4]][parts[3]]
    key = backend.keys.get(parts[5][len("key/") :])
    return None if key is None else dict(json.loads(key.policy))


def _simulate(policies: Policies, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decision of @cloud-copilot/iam-simulate (check.mjs) on each request. A run repeats
    the same calls (every poll, every block put): each distinct request is simulated once."""
    first: dict[str, int] = {}  # the request without its id -> the id simulated for it
    same_as: dict[int, int] = {}
    for request in requests:
        key = json.dumps({k: v for k, v in request.items() if k != "id"}, sort_keys=True)
        same_as[request["id"]] = first.setdefault(key, request["id"])
    distinct = [r for r in requests if same_as[r["id"]] == r["id"]]
    answer = _CHECKER.decide({"policies": policies, "requests": distinct})
    decided = {d["id"]: d for d in answer["decisions"]}
    return [{**decided[same_as[r["id"]]], "id": r["id"]} for r in requests]


class _Checker:
    """The one check.mjs of this process: started on first use, kept for the next runs (its
    start-up costs more CPU than a run's simulations), ended with the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._owner = 0  # the pid that started it: a forked child starts its own
        self._stderr: IO[bytes] | None = None

    def decide(self, job: dict[str, Any]) -> dict[str, Any]:
        """check.mjs's answer to one job: {decisions, simulated}."""
        with self._lock:
            proc = self._running()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(job) + "\n")
                proc.stdin.flush()
                answer = proc.stdout.readline()
            except BrokenPipeError:
                answer = ""
            if not answer:
                self._proc = None
                raise RuntimeError(f"twin/iam/check.mjs failed:\n{self._stderr_tail(proc)}")
            decided: dict[str, Any] = json.loads(answer)
            return decided

    def _running(self) -> subprocess.Popen[str]:
        if self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None:
            return self._proc
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the checker
        self._proc = subprocess.Popen(
            ["node", str(CHECKER)], cwd=REPO, text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        self._owner = os.getpid()
        return self._proc

    def _stderr_tail(self, proc: subprocess.Popen[str]) -> str:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return f"(exit {proc.returncode}) " + self._stderr.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or self._owner != os.getpid():
            return
        assert proc.stdin is not None
        proc.stdin.close()  # its end of input ends it
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


_CHECKER = _Checker()
atexit.register(_CHECKER.stop)


def _ctx_args(c: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": c["action"],
        "resource": c["resource"],
        "resource_type": c["resourceType"],
        "account": c["accountId"],
        "context": c.get("context", {}),
        "why": c.get("why", ""),
    }
