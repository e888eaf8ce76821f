"""One RSA key for all of moto's symmetric KMS keys in a process.

moto makes a 2048-bit RSA private key for every key CreateKey makes, symmetric ones included
(moto.kms.utils.generate_private_key's fallback), though only an asymmetric key signs with it:
about 90 ms of CPU a key. test/lambdas makes a key for every test (its `world`), so that was
3.0 s of a cProfile of test_teardown's 34 tests. Symmetric and HMAC keys now share one private
key, made the first time one is asked for; every asymmetric key spec keeps a key of its own.
Encryption does not use it (moto encrypts with each key's own key material).

Used by the emulator's process (twin/emulator/__init__.py) and by the Lambdas' tests."""

from __future__ import annotations

from typing import Any

_ASYMMETRIC_PREFIXES = ("RSA_", "ECC_", "SM2")


def share_one_symmetric_private_key() -> None:
    """Patch moto's KMS so that keys whose spec is not asymmetric share one private key."""
    import moto.kms.models as models

    if getattr(models.generate_private_key, "shared", False):
        return
    generate = models.generate_private_key
    made: list[Any] = []

    def shared(key_spec: str) -> Any:
        if key_spec.startswith(_ASYMMETRIC_PREFIXES):
            return generate(key_spec)
        if not made:
            made.append(generate(key_spec))
        return made[0]

    shared.shared = True  # type: ignore[attr-defined]
    models.generate_private_key = shared
