"""Whether a KMS key can encrypt EBS volumes for this stack."""

from __future__ import annotations

import re

import boto3
from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import KmsKeyNotUsable

_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:(?P<account>\d{12}):(key|alias)/")
_FIX = "grant the stack's roles use of the key (kmsKeyArns setting) or pass another kmsKeyId"


def usable_key_arn(key_id: str, purpose: str) -> str:
    """ARN of the key if it is an enabled symmetric encryption key; else KmsKeyNotUsable."""
    try:
        metadata = aws.kms().describe_key(KeyId=key_id)["KeyMetadata"]
    except ClientError as error:
        code = aws.error_code(error)
        if code in ("NotFoundException", "InvalidArnException"):
            raise KmsKeyNotUsable(
                f"KMS key {key_id} ({purpose}) does not exist in {aws.region()}: check the key id"
            ) from error
        if code in ("AccessDeniedException", "AccessDenied", "KMSInvalidStateException"):
            raise KmsKeyNotUsable(
                f"KMS key {key_id} ({purpose}) is not usable by the stack "
                f"({code}: {aws.error_message(error)}): {_FIX}"
            ) from error
        raise
    state = metadata.get("KeyState")
    if state != "Enabled" or not metadata.get("Enabled", False):
        raise KmsKeyNotUsable(
            f"KMS key {key_id} ({purpose}) is in state {state}, not Enabled: enable it or pass "
            "another kmsKeyId"
        )
    if (
        metadata.get("KeyUsage", "ENCRYPT_DECRYPT") != "ENCRYPT_DECRYPT"
        or metadata.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT"
    ):
        raise KmsKeyNotUsable(
            f"KMS key {key_id} ({purpose}) is not a symmetric encryption key, which EBS needs: "
            "pass a symmetric ENCRYPT_DECRYPT key"
        )
    return metadata["Arn"]


def key_account(key_arn: str | None) -> str | None:
    """The account that owns a key, from its ARN (None for a bare id or alias name)."""
    match = _KEY_ARN.match(key_arn or "")
    return match["account"] if match else None


def caller_account() -> str:
    """This account, for callers without a Lambda context (the handler reads it from the
    function ARN instead: GetCallerIdentity needs no permission but is one more call)."""
    return str(boto3.client("sts").get_caller_identity()["Account"])
