"""Deploys the synthesized stack into the emulator, as far as the workflow needs it.

Custom resources are not run: the AwsCustomResource (Custom::AWS) lookups and CDK's
Custom::S3AutoDeleteObjects (which empties a bucket when the stack is deleted; the twin never
deletes the stack) are left out, their provider functions are registered like any function and
never invoked. The file assets of the cloud assembly (*.assets.json; the data-plane program) are
uploaded into the CDK bootstrap bucket they name, as `cdk deploy` publishes them (the directory
assets, the functions' code, are run from cdk.out instead). S3 buckets are created in moto's S3
with their encryption, public access block, ownership, versioning, tags and lifecycle
(decoration: the twin does not expire objects). Their AWS::S3::BucketPolicy is resolved
(Deployment.bucket_policies) but not put on moto's bucket: moto enforces a bucket policy's Deny
statements without their conditions, so the enforce-SSL statement would refuse every request; the
IAM check judges each S3 call against the policy with its conditions instead (twin/iam/check.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from .cfn import (
    Deployment,
    Function,
    Resolver,
    Rule,
    TemplateError,
    load_template,
    resolved_definition,
    resources_of,
)
from .emulator import boot, s3_twin
from .emulator.server import Emulator
from .iam.check import role_policies

REPO = Path(__file__).resolve().parents[1]


def _image_for_launch_template(emu: Emulator, image_id: str) -> str:
    """EC2 resolves `resolve:ssm:<parameter>` in a launch template at each launch. The emulator's
    public AL2023 parameter answers the twin's transfer AMI (the "AL2023 base", emulator/boot.py),
    whose root filesystem UUID the demo's source AMI shares; the twin resolves it once here (the
    parameter does not change during a run)."""
    if not image_id.startswith("resolve:ssm:"):
        return image_id
    name = image_id.removeprefix("resolve:ssm:")
    if name == boot.TRANSFER_AMI_PARAMETER:
        emu.transfer_image()
        try:
            value = emu.boto3_client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
        except ClientError as error:
            raise TemplateError(f"the launch template's image {image_id}: {error}") from error
        return str(value)
    # another parameter (e.g. arm64): one of moto's stock Amazon AMIs stands in
    images = emu.boto3_client("ec2").describe_images(Owners=["amazon"])["Images"]
    linux = [i for i in images if i.get("Platform") != "windows" and i["Architecture"] == "x86_64"]
    if not linux:
        raise TemplateError("the emulator has no x86_64 Linux AMI to stand in for " + image_id)
    return str(linux[0]["ImageId"])


def bucket_name(stack_name: str, logical: str) -> str:
    """A bucket name the way CloudFormation generates one: stack and logical id, lower case, with
    a unique suffix, at most 63 characters of [a-z0-9-]."""
    stem = re.sub(r"[^a-z0-9-]+", "-", f"{stack_name}-{logical}".lower()).strip("-")[:49]
    suffix = hashlib.sha256(f"{stack_name}/{logical}".encode()).hexdigest()[:12]
    return f"{stem}-{suffix}"


def _lifecycle_rules(logical: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    rules = []
    for i, rule in enumerate(config.get("Rules", [])):
        unknown = set(rule) - {
            "Id", "Status", "Prefix", "ExpirationInDays", "AbortIncompleteMultipartUpload",
        }  # fmt: skip
        if unknown:
            raise TemplateError(f"{logical}: lifecycle rule fields {sorted(unknown)} not supported")
        out: dict[str, Any] = {
            "ID": rule.get("Id", f"rule-{i}"),
            "Status": rule["Status"],
            "Filter": {"Prefix": rule.get("Prefix", "")},
        }
        if "ExpirationInDays" in rule:
            out["Expiration"] = {"Days": int(rule["ExpirationInDays"])}
        if "AbortIncompleteMultipartUpload" in rule:
            days = rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"]
            out["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": int(days)}
        rules.append(out)
    return rules


_SSE_NAMES = {"ServerSideEncryptionByDefault": "ApplyServerSideEncryptionByDefault"}
_BUCKET_PROPERTIES = {
    "BucketEncryption", "PublicAccessBlockConfiguration", "LifecycleConfiguration", "Tags",
    "OwnershipControls", "VersioningConfiguration",
}  # fmt: skip


def _deploy_bucket(emu: Emulator, r: Resolver, logical: str, name: str, res: Any) -> None:
    props = r.resolve(res.get("Properties", {}))
    unknown = set(props) - _BUCKET_PROPERTIES
    if unknown:
        raise TemplateError(
            f"{logical}: bucket properties {sorted(unknown)} not supported by the twin"
        )
    s3 = emu.boto3_client("s3")
    s3.create_bucket(Bucket=name)
    if "BucketEncryption" in props:
        # CloudFormation's ServerSideEncryptionByDefault is the API's ApplyServerSideEncryption...
        rules = [
            {_SSE_NAMES.get(k, k): v for k, v in rule.items()}
            for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    if "PublicAccessBlockConfiguration" in props:
        s3.put_public_access_block(
            Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"]
        )
    if "OwnershipControls" in props:
        s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
    if "VersioningConfiguration" in props:
        s3.put_bucket_versioning(
            Bucket=name, VersioningConfiguration=props["VersioningConfiguration"]
        )
    if props.get("Tags"):
        s3.put_bucket_tagging(Bucket=name, Tagging={"TagSet": props["Tags"]})
    if "LifecycleConfiguration" in props:
        s3.put_bucket_lifecycle_configuration(
            Bucket=name,
            LifecycleConfiguration={
                "Rules": _lifecycle_rules(logical, props["LifecycleConfiguration"])
            },
        )


def deploy(emu: Emulator, cdk_out: Path) -> Deployment:
    stack_name, template = load_template(cdk_out)
    d = Deployment(stack_name=stack_name, region=emu.region, account=emu.account)
    r = Resolver(template, d, params=Resolver.parameter_values(template))
    # Names and ARNs first: environments and the definition refer to them.
    _name_resources(d, template)
    _deploy_buckets(emu, d, r, template)
    publish_file_assets(emu, r, cdk_out)
    _deploy_network(emu, d, r, template)
    _deploy_launch_templates(emu, d, r, template)
    _deploy_logs_and_documents(emu, d, r, template)
    _register_functions(d, r, template, cdk_out)
    _grant_listing(emu, d, r, template)
    main = _main_logical_id(template)
    for logical, res in resources_of(template, "AWS::StepFunctions::StateMachine").items():
        if main in (None, logical):  # the main workflow's (the only one's, or else the last one's)
            d.definition = resolved_definition(r, res["Properties"])
    _register_rules(d, r, template)
    if not d.definition:
        raise TemplateError("the template has no AWS::StepFunctions::StateMachine")
    return d


def _main_logical_id(template: dict[str, Any]) -> str | None:
    """The main workflow's logical id: the one the StateMachineArn output refers to (the template
    also has the cleanup and batch workflows); None without that output."""
    value = template.get("Outputs", {}).get("StateMachineArn", {}).get("Value")
    return value.get("Ref") if isinstance(value, dict) else None


def _name_resources(d: Deployment, template: dict[str, Any]) -> None:
    """The physical names and ARNs of the functions, state machines and buckets."""
    stack_name = d.stack_name
    prefix = f"arn:aws:lambda:{d.region}:{d.account}:function:"
    for logical, res in resources_of(template, "AWS::Lambda::Function").items():
        name = res["Properties"].get("FunctionName") or f"{stack_name}-{logical}"
        d.physical[logical] = name
        d.arns[logical] = prefix + name
    for logical, res in resources_of(template, "AWS::StepFunctions::StateMachine").items():
        name = res["Properties"].get("StateMachineName") or f"{stack_name}-{logical}"
        d.physical[logical] = f"arn:aws:states:{d.region}:{d.account}:stateMachine:{name}"
        d.arns[logical] = d.physical[logical]
        if _main_logical_id(template) in (None, logical):
            d.state_machine_arn, d.state_machine_name = d.physical[logical], name
    for logical in resources_of(template, "AWS::S3::Bucket"):
        name = template["Resources"][logical].get("Properties", {}).get("BucketName")
        name = name if isinstance(name, str) else bucket_name(stack_name, logical)
        d.physical[logical] = d.buckets[logical] = name
        d.arns[logical] = f"arn:aws:s3:::{name}"


def _deploy_buckets(emu: Emulator, d: Deployment, r: Resolver, template: dict[str, Any]) -> None:
    for logical, res in resources_of(template, "AWS::S3::Bucket").items():
        _deploy_bucket(emu, r, logical, d.buckets[logical], res)
    for logical, res in resources_of(template, "AWS::S3::BucketPolicy").items():
        props = r.resolve(res["Properties"])
        if props["Bucket"] not in d.buckets.values():
            raise TemplateError(f"{logical}: a policy of bucket {props['Bucket']}, not the stack's")
        d.bucket_policies[props["Bucket"]] = props["PolicyDocument"]
        d.physical[logical] = props["Bucket"]


def publish_file_assets(emu: Emulator, r: Resolver, cdk_out: Path) -> list[str]:
    """Upload every file asset of the cloud assembly to its destination bucket and key, creating
    the (bootstrap) bucket if the emulator has none yet, as `cdk bootstrap` + `cdk deploy` would.
    Returns the s3://bucket/key URLs written."""
    s3 = emu.boto3_client("s3")
    written = []
    for manifest in sorted(cdk_out.glob("*.assets.json")):
        for asset_hash, asset in json.loads(manifest.read_text()).get("files", {}).items():
            source = asset["source"]
            if source.get("packaging", "file") != "file":
                continue  # a directory zipped at publish time (function code): run from cdk.out
            path = cdk_out / source["path"]
            if not path.is_file():
                raise TemplateError(f"file asset {asset_hash}: {path} does not exist")
            for destination in asset["destinations"].values():
                bucket = r.sub(destination["bucketName"])
                key = r.sub(destination["objectKey"])
                try:
                    s3.head_bucket(Bucket=bucket)
                except ClientError:
                    s3.create_bucket(Bucket=bucket)
                s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
                written.append(f"s3://{bucket}/{key}")
    return written


def _deploy_network(emu: Emulator, d: Deployment, r: Resolver, template: dict[str, Any]) -> None:
    """The VPC, its subnets and security groups."""
    ec2 = emu.boto3_client("ec2")
    for logical, res in resources_of(template, "AWS::EC2::VPC").items():
        cidr = r.resolve(res["Properties"].get("CidrBlock", "10.0.0.0/16"))
        d.physical[logical] = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
    for logical, res in resources_of(template, "AWS::EC2::Subnet").items():
        props = r.resolve(res["Properties"])
        subnet = ec2.create_subnet(
            VpcId=props["VpcId"],
            CidrBlock=props["CidrBlock"],
            AvailabilityZone=props["AvailabilityZone"],
        )
        d.physical[logical] = subnet["Subnet"]["SubnetId"]
    for logical, res in resources_of(template, "AWS::EC2::SecurityGroup").items():
        props = r.resolve(res["Properties"])
        kwargs: dict[str, Any] = {
            "GroupName": f"{d.stack_name}-{logical}",
            "Description": props.get("GroupDescription", logical),
        }
        if props.get("VpcId"):
            kwargs["VpcId"] = props["VpcId"]
        d.physical[logical] = ec2.create_security_group(**kwargs)["GroupId"]


def _deploy_launch_templates(
    emu: Emulator, d: Deployment, r: Resolver, template: dict[str, Any]
) -> None:
    ec2 = emu.boto3_client("ec2")
    for logical, res in resources_of(template, "AWS::EC2::LaunchTemplate").items():
        props = r.resolve(res["Properties"])
        data = dict(props["LaunchTemplateData"])
        data["ImageId"] = _image_for_launch_template(emu, data.get("ImageId", "resolve:ssm:"))
        # No IAM in the twin: the instance profile only grants what the emulator never checks.
        data.pop("IamInstanceProfile", None)
        name = props.get("LaunchTemplateName") or f"{d.stack_name}-{logical}"
        created = ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)
        d.physical[logical] = created["LaunchTemplate"]["LaunchTemplateId"]


def _deploy_logs_and_documents(
    emu: Emulator, d: Deployment, r: Resolver, template: dict[str, Any]
) -> None:
    """The log groups and the Command document."""
    ssm, logs = emu.boto3_client("ssm"), emu.boto3_client("logs")
    for logical, res in resources_of(template, "AWS::Logs::LogGroup").items():
        name = res["Properties"].get("LogGroupName") or f"/twin/{d.stack_name}/{logical}"
        logs.create_log_group(logGroupName=name)
        d.physical[logical] = name
    for logical, res in resources_of(template, "AWS::SSM::Document").items():
        props = r.resolve(res["Properties"])
        name = props.get("Name") or f"{d.stack_name}-{logical}"
        content = props["Content"]
        ssm.create_document(
            Name=name,
            Content=content if isinstance(content, str) else json.dumps(content),
            DocumentType=props.get("DocumentType", "Command"),
            DocumentFormat=props.get("DocumentFormat", "JSON"),
        )
        d.physical[logical] = name
        d.document_name = name


def _register_functions(
    d: Deployment, r: Resolver, template: dict[str, Any], cdk_out: Path
) -> None:
    """Each Lambda function with its handler, environment and code from the cloud assembly."""
    for logical, res in resources_of(template, "AWS::Lambda::Function").items():
        props = r.resolve(res["Properties"])
        asset = res.get("Metadata", {}).get("aws:asset:path")
        code_dir = (cdk_out / asset) if asset else REPO / "lambdas"
        if not code_dir.is_dir():
            raise TemplateError(f"{logical}: code directory {code_dir} does not exist")
        d.functions[d.arns[logical]] = Function(
            logical_id=logical,
            name=d.physical[logical],
            arn=d.arns[logical],
            handler=props["Handler"],
            runtime=props.get("Runtime", ""),
            env={k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()},
            code_dir=code_dir.resolve(),
            memory=int(props.get("MemorySize", 128)),
            timeout=int(props.get("Timeout", 3)),
        )


def _grant_listing(emu: Emulator, d: Deployment, r: Resolver, template: dict[str, Any]) -> None:
    """Which buckets each function may list on a GetObject: S3 answers a missing key with 403 to
    the others (twin/emulator/s3_twin.py)."""
    policies = role_policies(template, r)
    for logical, res in resources_of(template, "AWS::Lambda::Function").items():
        role = res["Properties"].get("Role")
        role_id = role["Fn::GetAtt"][0] if isinstance(role, dict) and "Fn::GetAtt" in role else None
        documents = [p["policy"] for p in policies.get(str(role_id), []) if "policy" in p]
        statements = [
            st for doc in documents for st in _as_list(doc.get("Statement")) if isinstance(st, dict)
        ]
        emu.state.s3_listable[d.physical[logical]] = s3_twin.listable_buckets(
            statements, d.buckets.values()
        )


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _register_rules(d: Deployment, r: Resolver, template: dict[str, Any]) -> None:
    """The enabled EventBridge rules with an event pattern."""
    for logical, res in resources_of(template, "AWS::Events::Rule").items():
        props = r.resolve(res["Properties"])
        if "EventPattern" not in props or props.get("State", "ENABLED") != "ENABLED":
            continue
        d.rules.append(
            Rule(
                logical_id=logical,
                name=props.get("Name") or f"{d.stack_name}-{logical}",
                pattern=props["EventPattern"],
                targets=props.get("Targets", []),
            )
        )
