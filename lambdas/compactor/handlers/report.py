"""Task 11: the report of the execution, returned and published to EventBridge. Runs on every
path (success, the warnings chain after delivery, the failure chain); a PutEvents failure raises
so that the workflow routes it (after delivery: to the warnings chain's fallback)."""

from datetime import UTC, datetime

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.config import Config
from compactor.models import Report
from compactor.observability import Event, task_handler
from compactor.report import build, events
from compactor.report.metrics import emit_report_metrics


@task_handler
def handler(event: Event, context: LambdaContext) -> Report:
    config = Config.from_env(task="report")
    report = build.build(event, datetime.now(UTC), config)
    events.publish(report, config.event_bus_name)
    emit_report_metrics(event, report)
    return report
