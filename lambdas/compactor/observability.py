"""Powertools Logger, Tracer and Metrics shared by every handler, and the decorator that applies
them. Tracing is off outside Lambda (and with POWERTOOLS_TRACE_DISABLED=true)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "ebs-snapshot-compactor"
# Without a namespace every metric flush raises, which would fail the task after its work is
# done; so there is a default when the stack does not set POWERTOOLS_METRICS_NAMESPACE.
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "EbsSnapshotCompactor"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)

Event = dict[str, Any]
Result = TypeVar("Result")


def task_handler(
    func: Callable[[Event, LambdaContext], Result],
) -> Callable[[Event, LambdaContext], Result]:
    """Structured logs with the Lambda context, an X-Ray segment, and metrics flushed per call."""
    return logger.inject_lambda_context(clear_state=True)(
        tracer.capture_lambda_handler(metrics.log_metrics(func))
    )
