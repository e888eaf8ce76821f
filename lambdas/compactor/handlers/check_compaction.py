"""Task 5: has the Command document finished, and with what summary?"""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.config import Config
from compactor.models import CommandResult, CompactionResult, InstanceResult
from compactor.observability import Event, task_handler
from compactor.ssm import commands


@task_handler
def handler(event: Event, context: LambdaContext) -> CompactionResult:
    Config.from_env()  # fail fast on a broken environment, like every task
    return commands.check(
        cast(InstanceResult, event["instance"]), cast(CommandResult, event["command"])
    )
