"""Replacing attributes of moto's classes while keeping the originals the replacements call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (class, attribute name, replacement)
Patch = tuple[Any, str, Any]


def install(originals: dict[str, Any], patches: Mapping[str, Patch]) -> None:
    """Once per process (moto's classes are process-wide): keep each attribute's original under
    its key (None for an API moto lacks), then put every replacement in place."""
    if originals:
        return
    for key, (owner, name, _) in patches.items():
        originals[key] = getattr(owner, name, None)
    for owner, name, replacement in patches.values():
        setattr(owner, name, replacement)
