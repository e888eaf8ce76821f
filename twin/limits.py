"""contract/limits.json for the twin: the numbers the stack and the Lambdas share, AWS's quotas the
emulator enforces among them (one source, as compactor/contract.py is for the Lambdas)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

LIMITS = Path(__file__).resolve().parents[1] / "contract" / "limits.json"


@cache
def _limits() -> dict[str, dict[str, object]]:
    loaded: dict[str, dict[str, object]] = json.loads(LIMITS.read_text())["limits"]
    return loaded


def limit(name: str) -> int:
    """An integer limit by name (KeyError for an unknown one)."""
    return int(str(_limits()[name]["value"]))
