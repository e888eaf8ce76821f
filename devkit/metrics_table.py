"""docs/operations.md's metric table, from contract/metrics.json (python -m devkit.docs)."""

from __future__ import annotations

from devkit.docs import contract
from devkit.markdown import table


def metrics_table() -> str:
    spec = contract("metrics")
    base = ", ".join(f"`{d}`" for d in spec["defaultDimensions"])
    rows = [
        [
            f"`{name}`",
            metric["unit"],
            ", ".join([base, *(f"`{d}`" for d in metric["extraDimensions"])]),
            f"`{metric['emittedBy']}`",
            metric["description"],
        ]
        for name, metric in spec["metrics"].items()
    ]
    return table(["metric", "unit", "dimensions", "emitted by", "meaning"], rows)
