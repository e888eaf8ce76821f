"""The data-plane program leaves the Command document (issue #11): the twin's deploy publishes the
stack's file assets into the CDK bootstrap bucket as `cdk deploy` does, the document pins the
program's SHA-256, and the IAM check judges the instance's presigned GET of the program as
start_compaction (the signer), whose role may read exactly that object. Emulator-level: no disks."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from twin import deploy as deploy_module
from twin.cfn import Deployment, Resolver, load_template, resources_of
from twin.emulator.faults import Faults
from twin.emulator.s3_twin import objects_left
from twin.emulator.server import Emulator
from twin.iam import check as iam_check
from twin.iam import resolve


def _pinned_sha256(template: dict[str, Any]) -> str:
    (document,) = resources_of(template, "AWS::SSM::Document").values()
    script = "\n".join(document["Properties"]["Content"]["mainSteps"][0]["inputs"]["runCommand"])
    line = next(x for x in script.splitlines() if "sha256sum --check" in x)
    return line.split("'")[1].strip()


@pytest.fixture(scope="module")
def published(cdk_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    stack_name, template = load_template(cdk_out)
    with Emulator(tmp_path_factory.mktemp("emu") / "emu", Faults()) as emu:
        d = Deployment(stack_name=stack_name, region=emu.region, account=emu.account)
        r = Resolver(template, d, params=Resolver.parameter_values(template))
        deploy_module._name_resources(d, template)
        deploy_module._register_functions(d, r, template, cdk_out)
        written = deploy_module.publish_file_assets(emu, r, cdk_out)
        yield emu, d, template, written


def test_the_program_is_published_into_the_bootstrap_bucket_and_is_the_pinned_one(
    published: Any,
) -> None:
    emu, d, template, written = published
    (program,) = [url for url in written if url.endswith(".pyz")]
    bucket, key = program.removeprefix("s3://").split("/", 1)
    assert bucket == f"cdk-hnb659fds-assets-{emu.account}-{emu.region}"
    body = emu.boto3_client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == _pinned_sha256(template)
    # what start_compaction presigns: the workflow functions' PROGRAM_BUCKET / PROGRAM_KEY
    start = next(f for f in d.functions.values() if "StartCompaction" in f.logical_id)
    assert (start.env["PROGRAM_BUCKET"], start.env["PROGRAM_KEY"]) == (bucket, key)
    # the deployed assets are not a run's leftovers
    assert objects_left(emu.account) == []


def _recording(tmp_path: Path, d: Deployment, caller: str, bucket: str, key: str) -> Path:
    params = {"Bucket": bucket, "Key": key, "Presigned": True}
    contexts = resolve.contexts("s3", "GetObject", params, resolve.State(d.region, d.account))
    entry = {
        "caller": caller,
        "service": "s3",
        "action": "GetObject",
        "params": params,
        "contexts": [c.as_json() for c in contexts],
    }
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps(entry) + "\n")
    return path


def test_only_the_program_object_may_be_fetched_with_start_compactions_signature(
    published: Any, cdk_out: Path, tmp_path: Path
) -> None:
    _, d, _, written = published
    (program,) = [url for url in written if url.endswith(".pyz")]
    bucket, key = program.removeprefix("s3://").split("/", 1)
    start = next(f for f in d.functions.values() if "StartCompaction" in f.logical_id)
    allowed = _recording(tmp_path, d, start.name, bucket, key)
    assert iam_check.check_calls(allowed, d, cdk_out=cdk_out) == []
    denied = iam_check.check_calls(
        allowed, d, cdk_out=cdk_out, edit_policies=iam_check.without_action("s3:GetObject")
    )
    assert [(x.action, x.resource) for x in denied] == [
        ("s3:GetObject", f"arn:aws:s3:::{bucket}/{key}")
    ]
    # another asset in the bootstrap bucket (e.g. a function's code) is not readable
    other = _recording(tmp_path, d, start.name, bucket, "0" * 64 + ".zip")
    assert [x.decision for x in iam_check.check_calls(other, d, cdk_out=cdk_out)] == [
        "ImplicitlyDenied"
    ]
