"""S3 through moto's server, with what the twin adds: AWS's refusal of Signature Version 2, the
service's throttling answer, who signed a presigned URL, and what is left in the buckets.

- SigV2: "Any new buckets created after June 24, 2020 will not support SigV2 signed requests"
  (AWS's revised SigV2 deprecation plan); every bucket the twin deploys is new, so a request or a
  presigned URL signed with SigV2 (boto3's default for presigning in us-east-1 unless the client
  asks for `s3v4`) is refused with 400 InvalidRequest, as S3 refuses SigV2 where it supports only
  SigV4. moto itself accepts either.
- Throttling (throttle@STATE): S3 answers 503 SlowDown.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import parse_qs

from moto.s3.models import s3_backends

# The CDK bootstrap bucket (DefaultStackSynthesizer: cdk-<qualifier>-assets-<account>-<region>):
# it holds the stack's file assets (twin/deploy.py publishes them), not a run's objects.
BOOTSTRAP_ASSETS_BUCKET = re.compile(r"^cdk-[a-z0-9]+-assets-[0-9]{12}-[a-z0-9-]+$")

SIGV2_MESSAGE = (
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
)


def _query(environ: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)


def is_sigv2(environ: dict[str, Any]) -> bool:
    """A request signed with Signature Version 2: `Authorization: AWS key:signature`, or a presigned
    URL with AWSAccessKeyId/Signature/Expires."""
    if environ.get("HTTP_AUTHORIZATION", "").startswith("AWS "):
        return True
    query = _query(environ)
    return "AWSAccessKeyId" in query and "Signature" in query


def presigned_credential(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(access key id, service) of a SigV4 presigned URL (X-Amz-Credential), else None."""
    credential = (_query(environ).get("X-Amz-Credential") or [""])[0]
    scope = credential.split("/")
    if len(scope) == 5 and scope[4] == "aws4_request":
        return scope[0], scope[3]
    return None


def _xml_error(status: str, code: str, message: str) -> tuple[str, list[tuple[str, str]], bytes]:
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<RequestId>{request_id}</RequestId><HostId>twin</HostId></Error>"
    )
    return (
        status,
        [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)],
        (body.encode()),
    )


def sigv2_refusal() -> tuple[str, list[tuple[str, str]], bytes]:
    return _xml_error("400 Bad Request", "InvalidRequest", SIGV2_MESSAGE)


def throttling_response() -> tuple[str, list[tuple[str, str]], bytes]:
    return _xml_error("503 Slow Down", "SlowDown", "Please reduce your request rate.")


def objects_left(account: str) -> list[str]:
    """Every object in every bucket of the emulator but the CDK bootstrap bucket (the deployed
    assets), as s3://bucket/key (the other buckets are the stack's: a run must leave them empty)."""
    left = []
    for bucket in list(s3_backends[account]["aws"].buckets.values()):
        if BOOTSTRAP_ASSETS_BUCKET.match(bucket.name):
            continue
        for key in list(bucket.keys.keys()):
            left.append(f"s3://{bucket.name}/{key}")
    return sorted(left)
