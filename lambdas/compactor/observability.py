"""Powertools Logger, Tracer and Metrics shared by every handler, and the decorator that applies
them. Tracing is off outside Lambda (and with POWERTOOLS_TRACE_DISABLED=true)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

logger = Logger()
tracer = Tracer()
metrics = Metrics()

Event = dict[str, Any]
Result = TypeVar("Result")


def task_handler(
    func: Callable[[Event, LambdaContext], Result],
) -> Callable[[Event, LambdaContext], Result]:
    """Structured logs with the Lambda context, an X-Ray segment, and metrics flushed per call."""
    return logger.inject_lambda_context(clear_state=True)(
        tracer.capture_lambda_handler(metrics.log_metrics(func))
    )
