"""Powertools Logger, Tracer and Metrics shared by every handler, and the decorator that applies
them. Tracing is off outside Lambda (and with POWERTOOLS_TRACE_DISABLED=true)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from compactor import aws, contract
from compactor.errors import TransientAwsError

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "ebs-snapshot-compactor"
# Without a namespace every metric flush raises, which would fail the task after its work is
# done; so there is a default when the stack does not set POWERTOOLS_METRICS_NAMESPACE.
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "EbsSnapshotCompactor"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)

# the dimension every metric carries besides `service` (contract/metrics.json defaultDimensions)
STACK_DIMENSION = "Stack"
# a launch pool's or result's `market` → the Market dimension's value (contract/metrics.json)
MARKETS = {"spot": "Spot", "on-demand": "OnDemand"}

Event = dict[str, Any]
Result = TypeVar("Result")


def task_handler(
    func: Callable[[Event, LambdaContext], Result],
) -> Callable[[Event, LambdaContext], Result]:
    """Structured logs with the Lambda context, an X-Ray segment, and metrics flushed per call;
    a throttling or 5xx answer that outlived the SDK's retries becomes TransientAwsError, which
    the state machine retries, instead of a ClientError that would fail the execution."""

    @functools.wraps(func)
    def translated(event: Event, context: LambdaContext) -> Result:
        _set_stack_dimension()
        try:
            return func(event, context)
        except ClientError as error:
            if not aws.is_transient(error):
                raise
            operation = error.operation_name or "an AWS call"
            raise TransientAwsError(
                f"{operation} answered {aws.error_code(error)} after the SDK's retries "
                f"({aws.error_message(error)}): the workflow retries this step"
            ) from error

    return logger.inject_lambda_context(clear_state=True)(
        tracer.capture_lambda_handler(metrics.log_metrics(translated))
    )


def _stack_dimensions() -> dict[str, str]:
    stack = os.environ.get("STACK_NAME", "").strip()
    return {STACK_DIMENSION: stack} if stack else {}


def _set_stack_dimension() -> None:
    """The Stack dimension on every metric of this call, from STACK_NAME (functions without it,
    like start_from_tag, emit with `service` only)."""
    metrics.clear_default_dimensions()
    metrics.provider.dimension_set.pop(STACK_DIMENSION, None)
    metrics.set_default_dimensions(**_stack_dimensions())


def metric_spec(name: str) -> Mapping[str, Any]:
    """contract/metrics.json's entry of metric `name`; a name not written there is a bug."""
    specs: Mapping[str, Any] = contract.load("metrics")["metrics"]
    if name not in specs:
        raise ValueError(
            f"metric {name!r} is not in contract/metrics.json (known: {sorted(specs)})"
        )
    spec: Mapping[str, Any] = specs[name]
    return spec


def emit(name: str, value: float, dimensions: Mapping[str, str] | None = None) -> None:
    """Adds metric `name` (its unit from contract/metrics.json) to this call's EMF output. A metric
    with extra dimensions (`Phase`, `Market`) goes out at once as its own EMF blob with `service`,
    `Stack` and those; the others are flushed with the call's metrics when the handler returns."""
    spec = metric_spec(name)
    extra = dict(dimensions or {})
    if sorted(extra) != sorted(spec["extraDimensions"]):
        raise ValueError(
            f"metric {name} takes the dimensions {spec['extraDimensions']}, got {sorted(extra)}"
        )
    if not extra:
        metrics.add_metric(name=name, unit=spec["unit"], value=value)
        return
    with single_metric(
        name=name,
        unit=spec["unit"],
        value=value,
        namespace=NAMESPACE,
        default_dimensions={"service": SERVICE, **_stack_dimensions(), **extra},
    ):
        pass
