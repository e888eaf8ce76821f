"""twin/runner/moto_kms.py: symmetric keys share one private key, asymmetric keys sign with
their own."""

from __future__ import annotations

import boto3
from moto import mock_aws
from moto.kms.models import kms_backends

from twin.runner.moto_kms import share_one_symmetric_private_key


def test_symmetric_keys_share_one_private_key_and_asymmetric_keys_sign_with_their_own() -> None:
    share_one_symmetric_private_key()
    with mock_aws():
        kms = boto3.client("kms", region_name="us-east-1")
        first, second = (kms.create_key()["KeyMetadata"]["KeyId"] for _ in range(2))
        signer = kms.create_key(KeySpec="RSA_2048", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
        keys = kms_backends["123456789012"]["us-east-1"].keys
        assert keys[first].private_key is keys[second].private_key
        assert keys[signer].private_key is not keys[first].private_key
        signed = kms.sign(KeyId=signer, Message=b"m", SigningAlgorithm="RSASSA_PSS_SHA_256")
        assert kms.verify(
            KeyId=signer, Message=b"m", Signature=signed["Signature"],
            SigningAlgorithm="RSASSA_PSS_SHA_256",
        )["SignatureValid"]  # fmt: skip
        blob = kms.encrypt(KeyId=first, Plaintext=b"secret")["CiphertextBlob"]
        assert kms.decrypt(CiphertextBlob=blob)["Plaintext"] == b"secret"
