"""IAM proven, not assumed: a twin run's recorded AWS calls are all allowed by the synthesized task
role, and removing one grant makes the check report the calls that needed it (twin/iam)."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import twin.context as context_module
import twin.scenario as scenario_module
from twin.iam import check as iam_check
from twin.iam import resolve, usage
from twin.iam.recorder import INSTANCE_CALLER, STATE_MACHINE_CALLER, parse

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded_run(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One happy snapshot run; keeps the deployment and the emulator's recording of the calls."""
    captured: dict[str, Any] = {}
    keep = tmp_path_factory.mktemp("iam-calls")
    real_deploy = context_module.deploy

    def deploy(emu: Any, out: Path) -> Any:
        captured["deployment"] = real_deploy(emu, out)
        # the run deletes its work directory: record into a file of this test instead
        kept = keep / "calls.jsonl"
        shutil.copy(emu.calls_path, kept)
        emu.iam_recorder.path = kept
        captured["calls"] = kept
        return captured["deployment"]

    mp = pytest.MonkeyPatch()
    mp.setattr(context_module, "deploy", deploy)
    try:
        out = tmp_path_factory.mktemp("iam") / "out"
        # unencrypted: these tests judge the recorded calls after the run, when the emulator's
        # KMS keys (whose key policies KMS calls are judged with) are gone; every encrypted run
        # is judged while its keys exist (iam_denials in each report, required by holds())
        report = scenario_module.run(
            scenario_module.Options(
                cdk_out=cdk_out, out_dir=out, picture=False, encrypted=False, diskless=True
            )
        )
    finally:
        mp.undo()
    captured["report"] = report
    captured["cdk_out"] = cdk_out
    return captured


def _calls(run: dict[str, Any]) -> list[dict[str, Any]]:
    return iam_check.load_calls(run["calls"])


def test_every_call_of_the_lambdas_is_recorded_and_allowed(recorded_run: dict[str, Any]) -> None:
    calls = _calls(recorded_run)
    actions = {f"{c['service']}:{c['action']}" for c in calls}
    # the run's mutating calls are there (the twin's own set-up calls, e.g. RegisterImage of the
    # source, CreateSnapshot of registered disks, are not: they carry no X-Twin-Caller)
    for action in (
        "ec2:RunInstances", "ec2:CreateVolume", "ec2:AttachVolume",
        "ebs:ListSnapshotBlocks", "s3:PutObject", "s3:GetObject",
    ):  # fmt: skip
        assert action in actions, sorted(actions)
    assert all(c["caller"] for c in calls)
    # the instance's fetches of presigned URLs (the document's curl of the program, the program's
    # fetch of the block-list bundle) are judged as the function that signed them
    presigned = [c for c in calls if c["params"].get("Presigned")]
    assert [(c["service"], c["action"]) for c in presigned] == [("s3", "GetObject")] * 2
    assert all("StartCompaction" in c["caller"] for c in presigned)
    assert presigned[0]["params"]["Key"].endswith(".pyz")
    assert presigned[1]["params"]["Key"].endswith("/source-blocks.tar.gz")
    denials = iam_check.check_calls(
        recorded_run["calls"], recorded_run["deployment"], cdk_out=recorded_run["cdk_out"]
    )
    assert denials == [], "\n".join(map(str, denials))


@pytest.mark.parametrize(
    ("removed", "denied_call"),
    [
        ("ec2:CreateTags", "ec2:RunInstances"),  # tag-on-create of the instance and its volumes
        ("ec2:TerminateInstances", "ec2:TerminateInstances"),
        ("iam:PassRole", "ec2:RunInstances"),  # implied: the launch template's instance profile
        ("ebs:ListSnapshotBlocks", "ebs:ListSnapshotBlocks"),
        ("s3:GetObject", "s3:GetObject"),  # list_source_blocks' parts and the presigned GETs
    ],
)
def test_removing_a_grant_is_reported(
    recorded_run: dict[str, Any], removed: str, denied_call: str
) -> None:
    denials = iam_check.check_calls(
        recorded_run["calls"],
        recorded_run["deployment"],
        cdk_out=recorded_run["cdk_out"],
        edit_policies=iam_check.without_action(removed),
    )
    assert denials, f"removing {removed} denied nothing"
    assert {d.action for d in denials} == {removed}, "\n".join(map(str, denials))
    assert denied_call in {d.call for d in denials}


def test_the_workflow_role_runs_its_launch_attempt_and_nothing_more(
    recorded_run: dict[str, Any],
) -> None:
    """Run attempt (startExecution.sync:2): Step Functions starts and describes the child with the
    workflow's role and keeps the managed rule it learns the child's end from; each of those
    grants is needed, and the role may not start another state machine."""
    sync = [c for c in _calls(recorded_run) if c["caller"].startswith(STATE_MACHINE_CALLER)]
    assert {f"{c['service']}:{c['action']}" for c in sync} == {
        "states:StartExecution", "states:DescribeExecution",
        "events:PutTargets", "events:PutRule", "events:DescribeRule",
    }  # fmt: skip
    (start,) = [c for c in sync if c["action"] == "StartExecution"]
    assert "WorkflowAttemptStateMachine" in start["params"]["resource"]
    check = functools.partial(
        iam_check.check_calls,
        recorded_run["calls"],
        recorded_run["deployment"],
        cdk_out=recorded_run["cdk_out"],
    )
    assert check() == []
    for removed in ("states:StartExecution", "states:DescribeExecution", "events:PutRule"):
        denials = check(edit_policies=iam_check.without_action(removed))
        assert {(d.caller.split(":")[0], d.action) for d in denials} == {("state-machine", removed)}

    def another_machine(policies: iam_check.Policies) -> None:
        for entries in policies.values():
            text = json.dumps(entries)
            other = text.replace("WorkflowAttemptStateMachine", "OtherStateMachine")
            entries[:] = json.loads(other)

    denied = {d.action for d in check(edit_policies=another_machine)}
    assert {"states:StartExecution", "states:DescribeExecution"} <= denied


def test_a_condition_is_checked_not_just_the_action(recorded_run: dict[str, Any]) -> None:
    """Launching from another template than the stack's is denied (ec2:LaunchTemplate)."""

    def other_template(policies: iam_check.Policies) -> None:
        for entries in policies.values():
            text = json.dumps(entries)
            entries[:] = json.loads(
                text.replace(":launch-template/lt-", ":launch-template/lt-0other")
            )

    denials = iam_check.check_calls(
        recorded_run["calls"],
        recorded_run["deployment"],
        cdk_out=recorded_run["cdk_out"],
        edit_policies=other_template,
    )
    assert {d.call for d in denials} == {"ec2:RunInstances"}, "\n".join(map(str, denials))


def test_an_unmodelled_call_fails_loudly() -> None:
    with pytest.raises(resolve.UnmodelledCall, match="no resolver for ec2:ModifyInstanceAttribute"):
        resolve.contexts(
            "ec2", "ModifyInstanceAttribute", {}, resolve.State("us-east-1", "123456789012")
        )


def test_query_and_json_requests_are_parsed() -> None:
    auth = (
        "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host"
    )
    body = b"Action=CreateTags&Version=2016-11-15&ResourceId.1=snap-1&Tag.1.Key=k&Tag.1.Value=v"
    assert parse({"HTTP_AUTHORIZATION": auth}, body) == (
        "ec2",
        "CreateTags",
        {"ResourceId": ["snap-1"], "Tag": [{"Key": "k", "Value": "v"}]},
    )
    auth = auth.replace("/ec2/", "/ssm/")
    environ = {"HTTP_AUTHORIZATION": auth, "HTTP_X_AMZ_TARGET": "AmazonSSM.SendCommand"}
    assert parse(environ, b'{"DocumentName": "d"}') == ("ssm", "SendCommand", {"DocumentName": "d"})


WRITER = "aws:ResourceTag/ebs-snapshot-compactor:writer-instance"
SOURCE_INSTANCE = "ec2:SourceInstanceArn"


def _forged_read(call: dict[str, Any], tags: dict[str, str], caller_arn: str) -> dict[str, Any]:
    """The instance's GetSnapshotBlock of `call`'s snapshot, with that snapshot's tags replaced
    by `tags` and the request signed by the instance `caller_arn`."""
    (ctx,) = call["contexts"]
    context = {k: v for k, v in ctx["context"].items() if not k.startswith("aws:ResourceTag/")}
    context.update({f"aws:ResourceTag/{k}": v for k, v in tags.items()})
    context[SOURCE_INSTANCE] = caller_arn
    forged = {**ctx, "action": "ebs:GetSnapshotBlock", "context": context}
    return {**call, "action": "GetSnapshotBlock", "contexts": [forged]}


def test_the_instance_reads_only_the_snapshots_it_writes(
    recorded_run: dict[str, Any], tmp_path: Path
) -> None:
    """Issue #21 item 8: the instance role every execution shares may use the EBS direct APIs only
    on the snapshots whose writer-instance tag names the calling instance (ec2:SourceInstanceArn):
    another execution's pending snapshot and a delivered one of an earlier execution are denied,
    while the run's own calls (test above) are allowed."""
    instance_calls = [c for c in _calls(recorded_run) if c["caller"] == INSTANCE_CALLER]
    puts = [c for c in instance_calls if c["action"] == "PutSnapshotBlock"]
    assert puts, sorted({c["action"] for c in instance_calls})
    # every call of the instance carries its ARN, as IAM gives it for instance-profile credentials
    own_arns = {c["contexts"][0]["context"].get(SOURCE_INSTANCE) for c in instance_calls}
    (own_arn,) = own_arns
    assert own_arn and own_arn.startswith("arn:aws:ec2:") and ":instance/i-" in own_arn
    put = puts[0]
    own_tags = {
        k.removeprefix("aws:ResourceTag/"): v
        for k, v in put["contexts"][0]["context"].items()
        if k.startswith("aws:ResourceTag/")
    }
    assert own_tags["ebs-snapshot-compactor:writer-instance"] == own_arn
    other_arn = own_arn.rsplit("/", 1)[0] + "/i-0a0a0a0a0a0a0a0a0"
    forged = [
        # another execution's snapshot, still pending, read by this run's instance
        _forged_read(put, {**own_tags, "ebs-snapshot-compactor:execution": "another-run",
                           "ebs-snapshot-compactor:writer-instance": other_arn}, own_arn),
        # this run's snapshot once delivered, read by a later execution's instance
        _forged_read(put, {**own_tags, "ebs-snapshot-compactor:delivered": "true"}, other_arn),
    ]  # fmt: skip
    calls = tmp_path / "forged.jsonl"
    calls.write_text("".join(json.dumps(c) + "\n" for c in [put, *forged]))

    def check(edit: Any = None) -> list[iam_check.Denial]:
        return iam_check.check_calls(
            calls, recorded_run["deployment"], cdk_out=recorded_run["cdk_out"], edit_policies=edit
        )

    denials = check()
    assert [(d.caller, d.action, d.decision) for d in denials] == [
        (INSTANCE_CALLER, "ebs:GetSnapshotBlock", "ImplicitlyDenied")
    ] * 2, "\n".join(map(str, denials))

    def stack_tags_only(policies: iam_check.Policies) -> None:
        """The grant as it was before issue #21: the stack's snapshots, any execution's."""
        for entry in policies[INSTANCE_CALLER]:
            for statement in entry.get("policy", {}).get("Statement", []):
                statement.get("Condition", {}).get("StringEquals", {}).pop(WRITER, None)

    assert check(stack_tags_only) == [], "the writer-instance condition is what denies them"


class _FixedTags(resolve.State):
    """The emulator's view of a few outputs: their tags as a run leaves them."""

    def __init__(self, region: str, account: str, tags: dict[str, dict[str, str]]) -> None:
        super().__init__(region, account)
        self._tags = tags

    def tags(self, resource_id: str) -> dict[str, str]:
        return dict(self._tags.get(resource_id, {}))


def _function(run: dict[str, Any], module: str) -> str:
    """The twin's name of the function whose handler is compactor.handlers.<module>."""
    (name,) = [
        fn.name
        for fn in run["deployment"].functions.values()
        if fn.handler.startswith(f"compactor.handlers.{module}.")
    ]
    return name


def _decisions(
    run: dict[str, Any], tmp_path: Path, tags: dict[str, dict[str, str]], calls: list[Any]
) -> dict[tuple[str, str, str], str]:
    """(caller, call, resource id) -> the policies' decision on each (caller, service, action,
    params) of `calls`, the resources' tags at the time being `tags`."""
    deployment = run["deployment"]
    state = _FixedTags(deployment.region, deployment.account, tags)
    recording = tmp_path / "calls.jsonl"
    with recording.open("w") as out:
        for caller, service, action, params in calls:
            contexts = resolve.contexts(service, action, params, state)
            entry = {"caller": caller, "service": service, "action": action, "params": params}
            out.write(json.dumps({**entry, "contexts": [c.as_json() for c in contexts]}) + "\n")
    denials = iam_check.check_calls(recording, deployment, cdk_out=run["cdk_out"])
    decided = {
        (caller, f"{service}:{action}", _resource_id(params)): "Allowed"
        for caller, service, action, params in calls
    }
    for denial in denials:
        key = (denial.caller, denial.call, denial.resource.rsplit("/", 1)[-1])
        assert key in decided, denial
        decided[key] = denial.decision
    return decided


def _resource_id(params: dict[str, Any]) -> str:
    for key in ("SnapshotId", "ImageId"):
        if key in params:
            return str(params[key])
    return str(params["ResourceId"][0])


def test_no_role_may_delete_untag_or_retag_a_delivered_output(
    recorded_run: dict[str, Any], tmp_path: Path
) -> None:
    """Issue #22, finding 8: "never delete a delivered output" is IAM's promise too. The task
    role (teardown) and the sweeper's role are explicitly denied DeleteSnapshot/DeregisterImage
    of an output tagged delivered, DeleteTags on it, and CreateTags setting the delivered tag to
    anything but true; the same outputs undelivered (a run that fails before delivery) may go,
    and check_snapshots may still mark its snapshots delivered."""
    stack = recorded_run["deployment"].stack_name
    delivered_key = "ebs-snapshot-compactor:delivered"

    def output(role: str, delivered: bool) -> dict[str, str]:
        own = {
            "ebs-snapshot-compactor:stack": stack,
            "ebs-snapshot-compactor:execution": "run-1",
            "ebs-snapshot-compactor:role": role,
        }
        return {**own, delivered_key: "true"} if delivered else own

    snap, ami = "snap-0d0000000000000d1", "ami-0d0000000000000d1"
    new_snap, new_ami = "snap-0a0000000000000a1", "ami-0a0000000000000a1"
    other_snap = "snap-0a0000000000000a2"
    tags = {
        snap: output("snapshot", True),
        ami: output("image", True),
        new_snap: output("snapshot", False),
        new_ami: output("image", False),
        other_snap: output("snapshot", False),
    }
    teardown, sweep = _function(recorded_run, "teardown"), _function(recorded_run, "sweep")
    check = _function(recorded_run, "check_snapshots")
    delivered_false = [{"Key": delivered_key, "Value": "false"}]
    calls = [
        *[
            (caller, "ec2", action, {key: resource})
            for caller in (teardown, sweep)
            for action, key, resource in (
                ("DeleteSnapshot", "SnapshotId", snap),
                ("DeregisterImage", "ImageId", ami),
                ("DeleteSnapshot", "SnapshotId", new_snap),
                ("DeregisterImage", "ImageId", new_ami),
            )
        ],
        (teardown, "ec2", "DeleteTags", {"ResourceId": [snap], "Tag": [{"Key": delivered_key}]}),
        (teardown, "ec2", "DeleteTags", {"ResourceId": [ami]}),  # no keys: every tag
        (check, "ec2", "CreateTags", {"ResourceId": [snap], "Tag": delivered_false}),
        (check, "ec2", "CreateTags", {"ResourceId": [other_snap], "Tag": delivered_false}),
        (check, "ec2", "CreateTags", {"ResourceId": [new_snap], "Tag": [{"Key": delivered_key,
                                                                         "Value": "true"}]}),
    ]  # fmt: skip
    decided = _decisions(recorded_run, tmp_path, tags, calls)
    for caller in (teardown, sweep):
        assert decided[(caller, "ec2:DeleteSnapshot", snap)] == "ExplicitlyDenied"
        assert decided[(caller, "ec2:DeregisterImage", ami)] == "ExplicitlyDenied"
        assert decided[(caller, "ec2:DeleteSnapshot", new_snap)] == "Allowed"
        assert decided[(caller, "ec2:DeregisterImage", new_ami)] == "Allowed"
    assert decided[(teardown, "ec2:DeleteTags", snap)] == "ExplicitlyDenied"
    assert decided[(teardown, "ec2:DeleteTags", ami)] == "ExplicitlyDenied"
    assert decided[(check, "ec2:CreateTags", snap)] == "ExplicitlyDenied"
    assert decided[(check, "ec2:CreateTags", other_snap)] == "ExplicitlyDenied"
    # check_snapshots' own call: the delivered tag, true, on the stack's new snapshot
    assert decided[(check, "ec2:CreateTags", new_snap)] == "Allowed"


def test_the_run_records_which_statement_of_which_role_allowed_each_call(
    recorded_run: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """check_calls(usage_from=...) records each function's own role and the statements that
    allowed its calls (twin/iam/usage.py); one happy run leaves the batch functions' statements
    unused, which the merge names."""
    monkeypatch.setenv(usage.USAGE_DIR_ENV, str(tmp_path))
    denials = iam_check.check_calls(
        recorded_run["calls"], recorded_run["deployment"], cdk_out=recorded_run["cdk_out"],
        usage_from="one happy run",
    )  # fmt: skip
    assert denials == []
    report = usage.merge(usage.read_parts(tmp_path))
    roles = report["roles"]
    launch = next(r for r in roles if r.startswith("TaskRolesLaunch"))
    used = {sid for sid, row in roles[launch]["statements"].items() if row["calls"]}
    assert {"Task/RunSpotInstances", "Task/PassOnlyTheTransferInstanceRoleToEc2"} <= used
    # each function has a role of its own: the launch role has nothing of teardown's
    assert not any("RemoveOnlyTheStacksResources" in sid for sid in roles[launch]["statements"])
    summarize = next(r for r in roles if r.startswith("TaskRolesSummarizeBatch"))
    assert (
        f"{summarize}: statement Task/FindAFailedBatchsMapRun (states:ListMapRuns)"
        in (report["unused"])
    )
    assert any(f.startswith("unused: ") for f in usage.failures(report))
