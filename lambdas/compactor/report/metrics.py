"""The report task's metrics (contract/metrics.json): one count per outcome, the stored bytes a
delivered execution saved, the seconds of each phase (Phase dimension) and the market of the
transfer instance that did the work (Market dimension)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compactor import contract
from compactor.models import Report
from compactor.observability import MARKETS, emit

_DELIVERED_OUTCOMES = frozenset({"success", "succeeded-with-warnings"})


def bytes_saved(report: Report) -> int | None:
    """Source full size minus new full size, summed over the volumes where both are known; None
    when the execution delivered nothing or no volume has both sizes."""
    if report["outcome"] not in _DELIVERED_OUTCOMES:
        return None
    pairs = [
        (volume.get("sourceFullSizeBytes"), volume.get("newFullSizeBytes"))
        for volume in report["volumes"]
    ]
    known = [(source, new) for source, new in pairs if source is not None and new is not None]
    if not known:
        return None
    return sum(source - new for source, new in known)


def market(state: Mapping[str, Any]) -> str | None:
    instance = state.get("instance")
    if not isinstance(instance, Mapping):
        return None
    return MARKETS.get(str(instance.get("market")))


def emit_report_metrics(state: Mapping[str, Any], report: Report) -> None:
    outcome_metrics: Mapping[str, str] = contract.load("metrics")["outcomeMetrics"]
    outcome = str(report["outcome"])
    if outcome not in outcome_metrics:
        raise ValueError(
            f"outcome {outcome!r} has no metric in contract/metrics.json outcomeMetrics"
        )
    emit(outcome_metrics[outcome], 1)
    saved = bytes_saved(report)
    if saved is not None:
        emit("BytesSaved", saved)
    for phase, seconds in report["phaseSeconds"].items():
        emit("PhaseSeconds", seconds, {"Phase": phase})
    launched_on = market(state)
    if launched_on:
        emit("ExecutionsByMarket", 1, {"Market": launched_on})
