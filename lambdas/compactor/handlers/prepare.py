"""Task 1: validate the execution input and produce the plan. Creates nothing; called again by
the state machine while `sourcesReady` is false (a source snapshot is still pending)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import planning
from compactor.config import Config
from compactor.models import Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> Plan:
    # this account, from arn:aws:lambda:REGION:ACCOUNT:function:NAME (no GetCallerIdentity call)
    arn = str(getattr(context, "invoked_function_arn", "") or "")
    parts = arn.split(":")
    account = parts[4] if len(parts) > 4 and parts[4].isdigit() else None
    return planning.plan(
        event.get("input"), event.get("executionName", ""), Config.from_env(task="prepare"), account
    )
