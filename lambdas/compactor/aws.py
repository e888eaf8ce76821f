"""boto3 clients, created on first use so that tests and the local twin can set AWS_ENDPOINT_URL
and the Region before any client exists."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_kms import KMSClient
    from mypy_boto3_ssm import SSMClient

_BOTO_CONFIG = BotoConfig(retries={"mode": "standard", "max_attempts": 5})


@cache
def ec2() -> EC2Client:
    return boto3.client("ec2", config=_BOTO_CONFIG)


@cache
def ssm() -> SSMClient:
    return boto3.client("ssm", config=_BOTO_CONFIG)


@cache
def kms() -> KMSClient:
    return boto3.client("kms", config=_BOTO_CONFIG)


@cache
def events() -> EventBridgeClient:
    return boto3.client("events", config=_BOTO_CONFIG)


def region() -> str:
    return ec2().meta.region_name


def reset_clients() -> None:
    """Forget the clients (tests change the endpoint or Region between cases)."""
    for factory in (ec2, ssm, kms, events):
        factory.cache_clear()


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", "")) or str(error)
