"""S3 in the twin, as the source-blocks path uses it: a bucket deployed from a template (its policy
and CDK's auto-delete custom resource included), a presigned GET the "instance" fetches with curl,
the leak check counting objects left, and the IAM check of the ebs and s3 calls (a presigned GET
judged as the function that signed it).

The stack here is a small synthetic cloud assembly shaped like CDK's output, so these tests do not
depend on the workflow's stack; test_iam.py checks the real stack's calls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from devkit.pytest_ci import require_root
from twin.cfn import Deployment
from twin.deploy import deploy
from twin.emulator.blockstore import EBS_BLOCK
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator
from twin.facts import leaks
from twin.iam import check as iam_check
from twin.iam.check import Denial

GIB = 1024**3
STACK = "TwinS3Test"
FUNCTION = "ListSourceBlocksFunction"
ROLE = "ListSourceBlocksRole"
BUCKET = "SourceBlocksBucketA1B2C3D4"
BUCKET_ARN = {"Fn::GetAtt": [BUCKET, "Arn"]}
OBJECTS = {"Fn::Join": ["", [BUCKET_ARN, "/*"]]}
SNAPSHOTS = "arn:${AWS::Partition}:ec2:${AWS::Region}::snapshot/*"
LAMBDA_BASIC_EXECUTION = (
    "arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
)


def _template(bucket_policy_extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A stack like the workflow's for this path: a function whose role may list snapshot blocks
    and use the bucket; the bucket with enforce-SSL and CDK's autoDeleteObjects."""
    provider_role = "CustomS3AutoDeleteObjectsCustomResourceProviderRole3B1BD092"
    provider = "CustomS3AutoDeleteObjectsCustomResourceProviderHandler9D90184F"
    return {
        "Resources": {
            BUCKET: {
                "Type": "AWS::S3::Bucket",
                "Properties": {
                    "BucketEncryption": {
                        "ServerSideEncryptionConfiguration": [
                            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
                        ]
                    },
                    "PublicAccessBlockConfiguration": {
                        "BlockPublicAcls": True,
                        "BlockPublicPolicy": True,
                        "IgnorePublicAcls": True,
                        "RestrictPublicBuckets": True,
                    },
                    "LifecycleConfiguration": {
                        "Rules": [{"ExpirationInDays": 2, "Status": "Enabled"}]
                    },
                    "Tags": [{"Key": "aws-cdk:auto-delete-objects", "Value": "true"}],
                },
                "UpdateReplacePolicy": "Delete",
                "DeletionPolicy": "Delete",
            },
            f"{BUCKET}Policy": {
                "Type": "AWS::S3::BucketPolicy",
                "Properties": {
                    "Bucket": {"Ref": BUCKET},
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                "Effect": "Deny",
                                "Principal": {"AWS": "*"},
                                "Resource": [BUCKET_ARN, OBJECTS],
                            },
                            {
                                "Action": [
                                    "s3:DeleteObject*",
                                    "s3:GetBucket*",
                                    "s3:List*",
                                    "s3:PutBucketPolicy",
                                ],
                                "Effect": "Allow",
                                "Principal": {"AWS": {"Fn::GetAtt": [provider_role, "Arn"]}},
                                "Resource": [BUCKET_ARN, OBJECTS],
                            },
                            *(bucket_policy_extra or []),
                        ],
                    },
                },
            },
            f"{BUCKET}AutoDeleteObjectsCustomResource": {
                "Type": "Custom::S3AutoDeleteObjects",
                "Properties": {
                    "ServiceToken": {"Fn::GetAtt": [provider, "Arn"]},
                    "BucketName": {"Ref": BUCKET},
                },
                "DependsOn": [f"{BUCKET}Policy"],
            },
            provider_role: {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": []},
                    "ManagedPolicyArns": [{"Fn::Sub": LAMBDA_BASIC_EXECUTION}],
                },
            },
            provider: {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Code": {"S3Bucket": "cdk-assets", "S3Key": "x.zip"},
                    "Timeout": 900,
                    "MemorySize": 128,
                    "Handler": "index.handler",
                    "Role": {"Fn::GetAtt": [provider_role, "Arn"]},
                    "Runtime": "nodejs22.x",
                },
            },
            ROLE: {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": []},
                    "Policies": [
                        {
                            "PolicyName": "source-blocks",
                            "PolicyDocument": {
                                "Version": "2012-10-17",
                                "Statement": [
                                    {
                                        "Effect": "Allow",
                                        "Action": "ebs:ListSnapshotBlocks",
                                        "Resource": {"Fn::Sub": SNAPSHOTS},
                                    },
                                    {
                                        "Effect": "Allow",
                                        "Action": [
                                            "s3:GetObject",
                                            "s3:PutObject",
                                            "s3:DeleteObject",
                                        ],
                                        "Resource": OBJECTS,
                                    },
                                    {
                                        "Effect": "Allow",
                                        "Action": "s3:ListBucket",
                                        "Resource": BUCKET_ARN,
                                    },
                                ],
                            },
                        }
                    ],
                },
            },
            FUNCTION: {
                "Type": "AWS::Lambda::Function",
                "Properties": {
                    "Code": {"S3Bucket": "cdk-assets", "S3Key": "y.zip"},
                    "Handler": "compactor.handlers.list_source_blocks.handler",
                    "Role": {"Fn::GetAtt": [ROLE, "Arn"]},
                    "Runtime": "python3.12",
                    "Environment": {"Variables": {"SOURCE_BLOCKS_BUCKET": {"Ref": BUCKET}}},
                },
            },
            "StateMachine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "Definition": {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}
                },
            },
        }
    }


def _assembly(directory: Path, template: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{STACK}.template.json").write_text(json.dumps(template))
    manifest = {
        "version": "1",
        "artifacts": {
            STACK: {
                "type": "aws:cloudformation:stack",
                "properties": {"templateFile": f"{STACK}.template.json"},
            }
        },
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The emulator with the synthetic stack deployed; the IAM recording kept out of its workdir."""
    require_root()
    base = tmp_path_factory.mktemp("s3twin")
    cdk_out = _assembly(base / "cdk.out", _template())
    with Emulator(base / "emu", Faults()) as emu:
        d = deploy(emu, cdk_out)
        yield {"emu": emu, "d": d, "cdk_out": cdk_out, "base": base}


def _function(d: Deployment) -> str:
    return next(f.name for f in d.functions.values() if f.logical_id == FUNCTION)


def _as_function(emu: Emulator, d: Deployment, service: str) -> Any:
    """A client with the function's credentials whose requests carry X-Twin-Caller, as the
    runner's Lambda worker sends them."""
    name = _function(d)
    creds = emu.function_credentials(name)
    client = boto3.client(
        service,
        endpoint_url=emu.endpoint,
        region_name=emu.region,
        aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=creds["AWS_SESSION_TOKEN"],
        config=Config(signature_version="s3v4") if service == "s3" else None,
    )

    def mark(request: Any, **_: Any) -> None:
        request.headers["X-Twin-Caller"] = name

    client.meta.events.register("before-send", mark)
    return client


def _curl(url: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["curl", "--fail", "--silent", "--show-error", "--output", str(out), url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_bucket_is_deployed_from_the_template(stack: dict[str, Any]) -> None:
    emu, d = stack["emu"], stack["d"]
    name = d.buckets[BUCKET]
    assert name == name.lower() and len(name) <= 63 and name.startswith("twins3test-")
    assert d.functions[d.arns[FUNCTION]].env["SOURCE_BLOCKS_BUCKET"] == name
    s3 = emu.boto3_client("s3")
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    rules = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
    assert all(block.values())
    lifecycle = s3.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]
    assert lifecycle[0]["Expiration"]["Days"] == 2
    # the bucket policy is resolved for the IAM check, not put on moto's bucket (moto would apply
    # the enforce-SSL deny without its condition)
    policy = d.bucket_policies[name]
    assert policy["Statement"][0]["Effect"] == "Deny"
    assert policy["Statement"][0]["Resource"] == [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]
    # the auto-delete custom resource is not run (it acts when the stack is deleted)
    assert "CustomS3AutoDeleteObjectsCustomResourceProviderHandler9D90184F" in d.physical


def test_a_presigned_get_is_fetched_with_curl_from_the_instance(
    stack: dict[str, Any], tmp_path: Path
) -> None:
    emu, d = stack["emu"], stack["d"]
    name = d.buckets[BUCKET]
    s3 = _as_function(emu, d, "s3")
    body = os.urandom(3000)
    s3.put_object(Bucket=name, Key="exec-1/source-blocks.tar.gz", Body=body)
    try:
        url = s3.generate_presigned_url(
            "get_object",
            Params={"Bucket": name, "Key": "exec-1/source-blocks.tar.gz"},
            ExpiresIn=3600,
        )
        assert url.startswith(emu.endpoint) and "X-Amz-Credential=ASIATWIN" in url
        done = _curl(url, tmp_path / "bundle")
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "bundle").read_bytes() == body
        # as the transfer instance runs it: the Command document's script on this host
        script = tmp_path / "fetch.sh"
        script.write_text(f"set -eu\ncurl --fail -sS -o '{tmp_path}/b2' '{url}'\n")
        assert subprocess.run(["bash", str(script)], capture_output=True).returncode == 0
        assert (tmp_path / "b2").read_bytes() == body
        # a wrong key: curl --fail fails
        missing = url.replace("source-blocks.tar.gz", "nothing.tar.gz")
        assert _curl(missing, tmp_path / "none").returncode == 22
    finally:
        s3.delete_object(Bucket=name, Key="exec-1/source-blocks.tar.gz")


def test_a_sigv2_presigned_url_is_refused(stack: dict[str, Any], tmp_path: Path) -> None:
    """New buckets do not accept Signature Version 2 (boto3's presigning default in us-east-1
    unless the client asks for s3v4)."""
    emu, d = stack["emu"], stack["d"]
    name = d.buckets[BUCKET]
    emu.boto3_client("s3").put_object(Bucket=name, Key="v2/object", Body=b"x")
    try:
        v2 = boto3.client(
            "s3",
            endpoint_url=emu.endpoint,
            region_name=emu.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(signature_version="s3"),
        )
        url = v2.generate_presigned_url("get_object", Params={"Bucket": name, "Key": "v2/object"})
        assert "AWSAccessKeyId=" in url
        done = subprocess.run(["curl", "--silent", url], capture_output=True, text=True)
        assert "<Code>InvalidRequest</Code>" in done.stdout
        assert "AWS4-HMAC-SHA256" in done.stdout
        assert _curl(url, tmp_path / "v2").returncode == 22
    finally:
        emu.boto3_client("s3").delete_object(Bucket=name, Key="v2/object")


def test_the_leak_check_counts_objects_left_in_the_bucket(stack: dict[str, Any]) -> None:
    emu, d = stack["emu"], stack["d"]
    name = d.buckets[BUCKET]
    s3 = emu.boto3_client("s3")
    assert not [x for x in leaks(emu, "exec-2", set(), None) if x.startswith("object ")]
    s3.put_object(Bucket=name, Key="exec-2/parts/volume-0/000000.json", Body=b"[]")
    left = leaks(emu, "exec-2", set(), None)
    assert f"object s3://{name}/exec-2/parts/volume-0/000000.json" in left
    s3.delete_object(Bucket=name, Key="exec-2/parts/volume-0/000000.json")
    assert not [x for x in leaks(emu, "exec-2", set(), None) if x.startswith("object ")]


# --- IAM ----------------------------------------------------------------------------------------


def _holey_snapshot(emu: Emulator, path: Path) -> str:
    with open(path, "wb") as f:
        f.truncate(GIB)
        f.seek(3 * EBS_BLOCK)
        f.write(b"data")
    return emu.register_snapshot(path, "iam")


@pytest.fixture(scope="module")
def recorded(stack: dict[str, Any]) -> dict[str, Any]:
    """The calls of the source-blocks path, made as the function: list a snapshot's blocks, write
    a part and the bundle, list and delete them, and the instance's curl of a presigned GET."""
    emu, d, base = stack["emu"], stack["d"], stack["base"]
    calls = base / "calls.jsonl"
    shutil.copy(emu.calls_path, calls)
    emu.iam_recorder.path = calls
    snapshot_id = _holey_snapshot(emu, base / "iam.img")
    calls.write_text("")  # only the function's calls below
    name = d.buckets[BUCKET]
    ebs, s3 = _as_function(emu, d, "ebs"), _as_function(emu, d, "s3")
    listed = ebs.list_snapshot_blocks(SnapshotId=snapshot_id)["Blocks"]
    assert [b["BlockIndex"] for b in listed] == [3]
    s3.put_object(Bucket=name, Key="exec-3/parts/volume-0/000000.json", Body=b"[[3,1]]")
    s3.get_object(Bucket=name, Key="exec-3/parts/volume-0/000000.json")["Body"].read()
    s3.put_object(Bucket=name, Key="exec-3/source-blocks.tar.gz", Body=b"bundle")
    s3.delete_object(Bucket=name, Key="exec-3/parts/volume-0/000000.json")
    url = s3.generate_presigned_url(
        "get_object", Params={"Bucket": name, "Key": "exec-3/source-blocks.tar.gz"}
    )
    fetched = subprocess.run(["curl", "--fail", "-sS", url], capture_output=True, timeout=60)
    assert fetched.returncode == 0 and fetched.stdout == b"bundle"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=name, Prefix="exec-3/")["Contents"]]
    s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    return {"calls": calls, "snapshot": snapshot_id, "bucket": name, **stack}


def _check(recorded: dict[str, Any], cdk_out: Path | None = None, **kw: Any) -> list[Denial]:
    return iam_check.check_calls(
        recorded["calls"], recorded["d"], cdk_out=cdk_out or recorded["cdk_out"], **kw
    )


def test_the_calls_are_recorded_as_the_function(recorded: dict[str, Any]) -> None:
    calls = iam_check.load_calls(recorded["calls"])
    function = _function(recorded["d"])
    assert {c["caller"] for c in calls} == {function}
    actions = [f"{c['service']}:{c['action']}" for c in calls]
    assert actions == [
        "ebs:ListSnapshotBlocks", "s3:PutObject", "s3:GetObject", "s3:PutObject",
        "s3:DeleteObject", "s3:GetObject", "s3:ListObjectsV2", "s3:DeleteObjects",
    ]  # fmt: skip
    listed = calls[0]["contexts"][0]
    assert listed["action"] == "ebs:ListSnapshotBlocks"
    assert listed["resource"] == f"arn:aws:ec2:us-east-1::snapshot/{recorded['snapshot']}"
    presigned = calls[5]
    assert presigned["params"].get("Presigned") is True  # the curl GET, attributed to its signer
    assert presigned["contexts"][0]["context"]["s3:authType"] == "REST-QUERY-STRING"
    deleted = calls[7]["contexts"]
    assert {c["resource"] for c in deleted} == {
        f"arn:aws:s3:::{recorded['bucket']}/exec-3/source-blocks.tar.gz"
    }
    assert all("unmodelled" not in c for c in calls)


def test_the_calls_are_allowed_by_the_role_and_the_bucket_policy(recorded: dict[str, Any]) -> None:
    denials = _check(recorded)
    assert denials == [], "\n".join(map(str, denials))


@pytest.mark.parametrize(
    ("removed", "denied_calls"),
    [
        ("ebs:ListSnapshotBlocks", {"ebs:ListSnapshotBlocks"}),
        ("s3:GetObject", {"s3:GetObject"}),  # the Lambda's GetObject and the presigned curl GET
        ("s3:DeleteObject", {"s3:DeleteObject", "s3:DeleteObjects"}),
        ("s3:ListBucket", {"s3:ListObjectsV2"}),
    ],
)
def test_a_missing_grant_is_reported(
    recorded: dict[str, Any], removed: str, denied_calls: set[str]
) -> None:
    denials = _check(recorded, edit_policies=iam_check.without_action(removed))
    assert {d.action for d in denials} == {removed}, "\n".join(map(str, denials))
    assert {d.call for d in denials} == denied_calls
    assert {d.caller for d in denials} == {_function(recorded["d"])}
    if removed == "s3:GetObject":
        assert len(denials) == 2  # the presigned GET is judged as the signer too


def test_a_bucket_policy_deny_is_reported(recorded: dict[str, Any]) -> None:
    """The bucket policy is the S3 calls' resource policy: its explicit deny wins over the role."""
    deny_puts = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:PutObject",
        "Resource": OBJECTS,
    }
    other = _assembly(recorded["base"] / "deny.cdk.out", _template([deny_puts]))
    denials = _check(recorded, cdk_out=other)
    assert {(d.call, d.decision) for d in denials} == {("s3:PutObject", "ExplicitlyDenied")}
    assert len(denials) == 2
