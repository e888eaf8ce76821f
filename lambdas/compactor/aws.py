"""boto3 clients, created on first use so that tests and the local twin can set AWS_ENDPOINT_URL
and the Region before any client exists."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

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


@cache
def ebs() -> Any:
    # typed Any: mypy-boto3-ebs is not among the dev requirements
    return boto3.client("ebs", config=_BOTO_CONFIG)


@cache
def s3() -> Any:
    # The presigned GET (compactor/source_blocks.py) must name the bucket's regional host: the
    # default names the global one, which S3 redirects for a new bucket (the signature then no
    # longer matches) and Regions launched since 2019 do not serve (boto/boto3#2989). An IP
    # endpoint (the twin) still gets path style. Typed Any as ebs().
    config = BotoConfig(signature_version="s3v4", s3={"addressing_style": "virtual"})
    return boto3.client("s3", config=_BOTO_CONFIG.merge(config))


@cache
def sfn() -> Any:
    # typed Any: mypy-boto3-stepfunctions is not among the dev requirements
    return boto3.client("stepfunctions", config=_BOTO_CONFIG)


def region() -> str:
    return ec2().meta.region_name


# One quick attempt: check_compaction's progress read must not hold up its poll (the next poll
# reads again).
_LOGS_CONFIG = BotoConfig(
    retries={"mode": "standard", "max_attempts": 2}, connect_timeout=3, read_timeout=5
)


@cache
def logs() -> Any:
    # typed Any: mypy-boto3-logs is not among the dev requirements
    return boto3.client("logs", config=_LOGS_CONFIG)


def reset_clients() -> None:
    """Forget the clients (tests change the endpoint or Region between cases)."""
    for factory in (ec2, ssm, kms, events, ebs, s3, sfn, logs):
        factory.cache_clear()


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


# Answers that mean "ask again later", not "this failed": botocore's standard retry mode already
# retried them a few times, so a poll task reports "not done yet" and lets its bounded loop go on.
THROTTLING_ERRORS = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "ProvisionedThroughputExceededException",
        "EC2ThrottledException",
        "BandwidthLimitExceeded",
        "PriorRequestNotComplete",
        # EBS direct APIs: too many requests in flight for the account (StartSnapshot & co.)
        "ConcurrentLimitExceededException",
    }
)
SERVER_ERRORS = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "InternalServerException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
    }
)


def is_transient(error: ClientError) -> bool:
    """A throttling answer or a 5xx after botocore's own retries: worth another poll."""
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    code = error_code(error)
    return code in THROTTLING_ERRORS or code in SERVER_ERRORS or status >= 500


def error_message(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Message", "")) or str(error)
