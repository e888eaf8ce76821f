"""Reads the synthesized CloudFormation template and "deploys" the parts the twin needs into the
emulator: network, launch template, Command document, log groups; and resolves the intrinsic
functions in the state machine definition, the Lambda environments and the EventBridge rules.

Only what the stack actually uses is supported; anything else fails with the construct's name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ZONES = ("a", "b", "c", "d", "e", "f")
STATE_MACHINE = "AWS::StepFunctions::StateMachine"
BUCKET = "AWS::S3::Bucket"


class TemplateError(Exception):
    """The template uses something the twin cannot deploy."""


@dataclass
class Function:
    logical_id: str
    name: str
    arn: str
    handler: str
    runtime: str
    env: dict[str, str]
    code_dir: Path
    memory: int
    timeout: int


@dataclass
class Rule:
    logical_id: str
    name: str
    pattern: dict[str, Any]
    targets: list[dict[str, Any]]


@dataclass
class Deployment:
    stack_name: str
    region: str
    account: str
    physical: dict[str, str] = field(default_factory=dict)
    arns: dict[str, str] = field(default_factory=dict)
    functions: dict[str, Function] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    state_machine_arn: str = ""
    state_machine_name: str = ""
    definition: dict[str, Any] = field(default_factory=dict)
    document_name: str = ""
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    # S3 buckets of the stack: logical id -> bucket name; bucket name -> its bucket policy
    buckets: dict[str, str] = field(default_factory=dict)
    bucket_policies: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_template(cdk_out: Path) -> tuple[str, dict[str, Any]]:
    """The single stack template of a cloud assembly: (stack name, template)."""
    manifest = json.loads((cdk_out / "manifest.json").read_text())
    stacks = [
        (name, art)
        for name, art in manifest.get("artifacts", {}).items()
        if art.get("type") == "aws:cloudformation:stack"
    ]
    if len(stacks) != 1:
        raise TemplateError(f"expected one stack in {cdk_out}, found {[n for n, _ in stacks]}")
    name, artifact = stacks[0]
    template_file = artifact.get("properties", {}).get("templateFile", f"{name}.template.json")
    stack_name = artifact.get("properties", {}).get("stackName", name)
    return stack_name, json.loads((cdk_out / template_file).read_text())


class Resolver:
    def __init__(self, template: dict[str, Any], deployment: Deployment, params: dict[str, Any]):
        self.template = template
        self.resources: dict[str, Any] = template.get("Resources", {})
        self.d = deployment
        self.params = params

    @staticmethod
    def parameter_values(template: dict[str, Any]) -> dict[str, Any]:
        """Template parameters take their defaults; SSM-typed ones (the Powertools layer ARN,
        the bootstrap version) are not deployed by the twin and keep a readable placeholder."""
        values: dict[str, Any] = {}
        for name, spec in template.get("Parameters", {}).items():
            default = spec.get("Default")
            if spec.get("Type", "").startswith("AWS::SSM::Parameter::Value"):
                values[name] = f"twin-unresolved-ssm-parameter:{default}"
            else:
                values[name] = default
        return values

    def pseudo(self, name: str) -> Any:
        values = {
            "AWS::Region": self.d.region,
            "AWS::AccountId": self.d.account,
            "AWS::StackName": self.d.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackId": (
                f"arn:aws:cloudformation:{self.d.region}:{self.d.account}:stack/"
                f"{self.d.stack_name}/00000000-0000-0000-0000-000000000000"
            ),
            "AWS::NoValue": None,
        }
        if name not in values:
            raise TemplateError(f"pseudo parameter {name} is not supported by the twin")
        return values[name]

    def ref(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self.pseudo(name)
        if name in self.params:
            return self.params[name]
        if name in self.d.physical:
            return self.d.physical[name]
        if name in self.resources:
            return f"{self.d.stack_name}-{name}"
        raise TemplateError(f"Ref to unknown {name}")

    def get_att(self, name: str, attr: str) -> Any:
        if attr == "Arn" and name in self.d.arns:
            return self.d.arns[name]
        if attr == "Name" and self.resources.get(name, {}).get("Type") == STATE_MACHINE:
            # Ref of a state machine is its ARN; GetAtt Name is the last part of it
            return self.d.arns[name].rsplit(":", 1)[-1]
        if attr == "Arn" and self.resources.get(name, {}).get("Type") == "AWS::Logs::LogGroup":
            # CloudFormation's Arn of a log group ends in ":*", so it also names the group's streams
            group = self.d.physical.get(name, f"/twin/{self.d.stack_name}/{name}")
            return f"arn:aws:logs:{self.d.region}:{self.d.account}:log-group:{group}:*"
        if name in self.d.physical and attr in ("GroupId", "LogGroupName", "Name"):
            return self.d.physical[name]
        if name in self.d.buckets:
            return self.bucket_att(self.d.buckets[name], attr)
        resource = self.resources.get(name)
        if resource is None:
            raise TemplateError(f"Fn::GetAtt of unknown resource {name}")
        service = resource["Type"].split("::")[1].lower()
        return (
            f"arn:aws:{service}:{self.d.region}:{self.d.account}:twin/{self.d.stack_name}-{name}"
            if attr == "Arn"
            else f"{self.d.stack_name}-{name}-{attr}"
        )

    def bucket_att(self, bucket: str, attr: str) -> str:
        region = self.d.region
        values = {
            "Arn": f"arn:aws:s3:::{bucket}",
            "DomainName": f"{bucket}.s3.amazonaws.com",
            "RegionalDomainName": f"{bucket}.s3.{region}.amazonaws.com",
            "DualStackDomainName": f"{bucket}.s3.dualstack.{region}.amazonaws.com",
            "WebsiteURL": f"http://{bucket}.s3-website-{region}.amazonaws.com",
        }
        if attr not in values:
            raise TemplateError(f"Fn::GetAtt {attr} of a bucket is not supported by the twin")
        return values[attr]

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.template["Conditions"][name]))

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.resolve(x) for x in node) if v is not None]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Fn::GetAtt":
                name, attr = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.get_att(name, attr)
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(p) for p in self.resolve(parts))
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                sep, text = arg
                return str(self.resolve(text)).split(sep)
            if key == "Fn::GetAZs":
                return [f"{self.d.region}{z}" for z in ZONES[:3]]
            if key == "Fn::Sub":
                return self.sub(arg)
            if key == "Fn::If":
                cond, yes, no = arg
                return self.resolve(yes if self.condition(cond) else no)
            if key == "Fn::Equals":
                a, b = self.resolve(arg)
                return a == b
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::And":
                return all(self.resolve(arg))
            if key == "Fn::Or":
                return any(self.resolve(arg))
            if key == "Condition":
                return self.condition(arg)
            if key.startswith("Fn::"):
                raise TemplateError(f"{key} is not supported by the twin")
        return {k: self.resolve(v) for k, v in node.items()}

    def sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        values = {k: self.resolve(v) for k, v in variables.items()}

        def one(m: re.Match[str]) -> str:
            expr = m.group(1)
            if expr.startswith("!"):
                return "${" + expr[1:] + "}"
            if expr in values:
                return str(values[expr])
            if "." in expr and not expr.startswith("AWS::"):
                name, attr = expr.split(".", 1)
                return str(self.get_att(name, attr))
            return str(self.ref(expr))

        return re.sub(r"\$\{([^}]+)\}", one, text)


def resources_of(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: r for k, r in template.get("Resources", {}).items() if r["Type"] == kind}


def resolved_definition(r: Resolver, props: dict[str, Any]) -> dict[str, Any]:
    """A state machine's definition (DefinitionString or Definition) with its intrinsics resolved
    and its DefinitionSubstitutions applied."""
    text = r.resolve(props.get("DefinitionString") or json.dumps(props.get("Definition")))
    for key, value in r.resolve(props.get("DefinitionSubstitutions", {})).items():
        text = text.replace("${" + key + "}", str(value))
    definition: dict[str, Any] = json.loads(text)
    return definition
