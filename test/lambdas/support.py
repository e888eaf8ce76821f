"""Test helpers: answers and errors injected into a boto3 client with botocore's event hooks, so
the code under test runs unchanged against moto while a call moto lacks (or a failure AWS can
give) is played back."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastjsonschema
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from compactor import schemas


@dataclass
class FakeLambdaContext:
    function_name: str = "compactor-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:compactor-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"


def client_error(operation: str, code: str, message: str = "injected") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


def on_params(client: Any, operation: str, handler: Callable[[dict[str, Any]], None]) -> None:
    """Call handler with the API parameters of every `operation` call before it is sent; the
    handler may raise (e.g. a ClientError) to make the call fail."""
    event = f"before-parameter-build.{client.meta.service_model.service_id.hyphenize()}.{operation}"

    def hook(params: dict[str, Any], **_: Any) -> None:
        handler(params)

    client.meta.events.register(event, hook)


def capture(client: Any, operation: str) -> list[dict[str, Any]]:
    """Every parameter dict `operation` is called with (the call still goes to moto)."""
    calls: list[dict[str, Any]] = []
    on_params(client, operation, lambda params: calls.append(dict(params)))
    return calls


def respond(
    client: Any,
    operation: str,
    answer: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """Answer `operation` with answer(params) instead of sending it (None: send it to moto).
    Returns the list of parameter dicts the operation was called with."""
    service = client.meta.service_model.service_id.hyphenize()
    calls: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []

    def remember(params: dict[str, Any], **_: Any) -> None:
        calls.append(dict(params))
        pending.append(dict(params))

    def reply(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        params = pending.pop()
        parsed = answer(params)
        if parsed is None:
            return None
        status = 400 if "Error" in parsed else 200
        parsed.setdefault("ResponseMetadata", {"HTTPStatusCode": status})
        return AWSResponse("https://injected", status, {}, None), parsed

    client.meta.events.register(f"before-parameter-build.{service}.{operation}", remember)
    client.meta.events.register(f"before-call.{service}.{operation}", reply)
    return calls


def error_response(code: str, message: str = "injected") -> dict[str, Any]:
    return {"Error": {"Code": code, "Message": message}}


def amend(client: Any, operation: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Let moto answer `operation`, then change its parsed response in place."""
    service = client.meta.service_model.service_id.hyphenize()

    def hook(parsed: dict[str, Any], **_: Any) -> None:
        change(parsed)

    client.meta.events.register(f"after-call.{service}.{operation}", hook)


@functools.cache
def _validator(name: str) -> Callable[[Any], Any]:
    # compiled once per test session (Powertools' validate compiles on every call); no defaults
    # are filled in, so the checked value stays as the code made it
    return fastjsonschema.compile(schemas.load(name), use_default=False)


def assert_valid(data: Any, name: str) -> None:
    """data satisfies contract/schemas/<name>; else AssertionError naming the first failure."""
    try:
        _validator(name)(data)
    except fastjsonschema.JsonSchemaValueException as error:
        raise AssertionError(
            f"{name}: {error.message} (rule {error.rule}): {error.value!r}"
        ) from None


def checked_handler(module: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    """handler, whose every result is checked against results/<module>.schema.json."""

    @functools.wraps(handler)
    def checked(event: Any, context: Any) -> Any:
        result = handler(event, context)
        assert_valid(result, schemas.result_schema(module))
        return result

    return checked


def summary_volume(source_volume_id: str, **fields: Any) -> dict[str, Any]:
    """One volume's entry of the data plane's summary line as `sparsecopy job` prints it
    (contract/schemas/summary.schema.json): a target volume's copy of a one-partition disk,
    `fields` changed."""
    entry: dict[str, Any] = {
        "sourceVolumeId": source_volume_id,
        "sourceConsistent": True,
        "targetVolumeId": "vol-0fedcba9876543210",
        "targetSnapshotId": None,
        "source_bytes_read": 1_048_576,
        "target_bytes_written": 524_288,
        "blocks_put": None,
        "blocks_written": 1,
        "zero_blocks": 0,
        "outside_partitions_bytes": 0,
        "held_blocks": None,
        "held_blocks_read": None,
        "verified": True,
        "seconds": 1.5,
        "table": "none",
        "partition_count": 1,
        "methods": {"allocated": 1},
        "fsck": {"clean": 1},
        "note_count": 0,
        "notes": [],
    }
    unknown = set(fields) - set(entry)
    if unknown:
        raise KeyError(f"no such key in a summary entry: {sorted(unknown)}")
    return entry | fields


def instance_result(
    instance_id: str, availability_zone: str = "us-east-1a", **fields: Any
) -> dict[str, Any]:
    """launch's result (results/launch.schema.json) for an instance, `fields` changed."""
    result: dict[str, Any] = {
        "instanceId": instance_id,
        "availabilityZone": availability_zone,
        "subnetId": "subnet-0123456789abcdef0",
        "instanceType": "m7i.large",
        "market": "spot",
        "failedPools": [],
    }
    assert_valid(result | fields, schemas.result_schema("launch"))
    return result | fields


def plan_of(execution_name: str, volumes: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A plan (plan.schema.json) as prepare makes it for a snapshot job, with `volumes` (each
    `index` and `sourceSnapshotId` at least; the rest as for an unencrypted 8 GiB volume) and
    `fields` changed."""
    unencrypted = {
        "deviceName": None,
        "sizeGiB": 8,
        "encrypted": False,
        "kmsKeyId": None,
        "targetKmsKeyId": None,
        "sourceKmsKeyId": None,
        "sourceFullSizeBytes": None,
    }
    plan: dict[str, Any] = {
        "executionName": execution_name,
        "source": {"kind": "snapshot", "snapshotId": volumes[0]["sourceSnapshotId"]},
        "volumes": [unencrypted | volume for volume in volumes],
        "image": None,
        "method": "allocated",
        "target": "snapshot",
        "jobs": 16,
        "verify": True,
        "fastSnapshotRestoreAzs": [],
        "kmsKeyId": None,
        "imageName": None,
        "tags": {},
        "sourcesReady": True,
        "pendingSnapshotIds": [],
        "instanceTypes": ["m7i.large"],
        "compactionPoll": {"intervalSeconds": 30, "maxAttempts": 360},
        "bytesToCopy": 0,
        "notes": [],
    } | fields
    assert_valid(plan, schemas.PLAN)
    return plan
