"""Task 1: validate the execution input and produce the plan. Creates nothing."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import planning
from compactor.config import Config
from compactor.models import Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> Plan:
    return planning.plan(event.get("input"), event.get("executionName", ""), Config.from_env())
