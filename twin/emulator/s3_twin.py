"""S3 through moto's server, with what the twin adds: AWS's refusal of Signature Version 2, the
service's throttling answer, who signed a presigned URL, and what is left in the buckets.

- SigV2: "Any new buckets created after June 24, 2020 will not support SigV2 signed requests"
  (AWS's revised SigV2 deprecation plan); every bucket the twin deploys is new, so a request or a
  presigned URL signed with SigV2 (boto3's default for presigning in us-east-1 unless the client
  asks for `s3v4`) is refused with 400 InvalidRequest, as S3 refuses SigV2 where it supports only
  SigV4. moto itself accepts either.
- Throttling (throttle@STATE): S3 answers 503 SlowDown.
- A missing key is 403 AccessDenied, not 404 NoSuchKey, for a caller that may not s3:ListBucket
  the bucket (S3 API reference, GetObject and HeadObject: "If you don't have the s3:ListBucket
  permission, Amazon S3 returns an HTTP status code 403 Access Denied error"). GetObject carries no
  `s3:prefix`, so only an Allow of s3:ListBucket on the bucket without a Condition counts
  (`listable_buckets`, from the deployed roles: twin/deploy.py); a Lambda with no such grant, or
  not deployed, is refused (harsh by default). The twin's own clients (no caller header) get 404.
"""

from __future__ import annotations

import fnmatch
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, unquote

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


def _listed(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value]) if v is not None]


def _matches(patterns: Any, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value.lower(), p.lower()) for p in _listed(patterns))


def listable_buckets(
    statements: Iterable[Mapping[str, Any]], buckets: Iterable[str]
) -> frozenset[str]:
    """The buckets a request without `s3:prefix` (GetObject, HeadObject) may s3:ListBucket under
    these identity-policy statements: allowed by a statement with no Condition (a condition on
    `s3:prefix` cannot hold for such a request; any other is taken as not holding either) and
    denied by none."""
    statements = list(statements)

    def applies(statement: Mapping[str, Any], arn: str) -> bool:
        return _matches(statement.get("Action"), "s3:ListBucket") and _matches(
            statement.get("Resource"), arn
        )

    listable = set()
    for bucket in buckets:
        arn = f"arn:aws:s3:::{bucket}"
        allowed = any(
            s.get("Effect") == "Allow" and not s.get("Condition") and applies(s, arn)
            for s in statements
        )
        denied = any(s.get("Effect") == "Deny" and applies(s, arn) for s in statements)
        if allowed and not denied:
            listable.add(bucket)
    return frozenset(listable)


def object_read(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(bucket, key) of a path-style GetObject or HeadObject, else None."""
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return None
    bucket, _, key = unquote(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
    query = _query(environ)
    if not bucket or not key or set(query) & {"tagging", "acl", "attributes", "uploadId"}:
        return None
    return bucket, key


def missing_key_refusal(
    environ: dict[str, Any],
    account: str,
    caller: str | None,
    listable: Mapping[str, frozenset[str]],
) -> tuple[str, list[tuple[str, str]], bytes] | None:
    """403 AccessDenied for a Lambda's read of a key that does not exist in a bucket it may not
    list; None when S3 would answer as moto does."""
    read = object_read(environ)
    if caller is None or read is None:
        return None
    bucket_name, key = read
    bucket = s3_backends[account]["aws"].buckets.get(bucket_name)
    if bucket is None or key in bucket.keys or bucket_name in listable.get(caller, frozenset()):
        return None
    return _xml_error("403 Forbidden", "AccessDenied", "Access Denied")
