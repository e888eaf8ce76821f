"""Task 11: the report of the execution, returned and published to EventBridge."""

from datetime import UTC, datetime

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.config import Config
from compactor.models import Report
from compactor.observability import Event, metrics, task_handler
from compactor.report import build, events


@task_handler
def handler(event: Event, context: LambdaContext) -> Report:
    config = Config.from_env()
    report = build.build(event, datetime.now(UTC))
    events.publish(report, config.event_bus_name)
    metrics.add_metric(
        name="Succeeded" if report["outcome"] == "success" else "Failed", unit="Count", value=1
    )
    return report
