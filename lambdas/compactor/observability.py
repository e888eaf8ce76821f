"""Powertools Logger, Tracer and Metrics shared by every handler, and the decorator that applies
them. Tracing is off outside Lambda (and with POWERTOOLS_TRACE_DISABLED=true)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import TransientAwsError

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
    """Structured logs with the Lambda context, an X-Ray segment, and metrics flushed per call;
    a throttling or 5xx answer that outlived the SDK's retries becomes TransientAwsError, which
    the state machine retries, instead of a ClientError that would fail the execution."""

    @functools.wraps(func)
    def translated(event: Event, context: LambdaContext) -> Result:
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
