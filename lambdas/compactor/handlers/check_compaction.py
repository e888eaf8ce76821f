"""Task 5: has the Command document finished, and with what summary? How far has it got?"""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.boundary import field, optional_field
from compactor.config import Config
from compactor.models import CommandResult, CompactionProgress, CompactionResult, InstanceResult
from compactor.observability import Event, task_handler
from compactor.ssm import commands


@task_handler
def handler(event: Event, context: LambdaContext) -> CompactionResult:
    config = Config.from_env(task="check_compaction")
    return commands.check(
        field(event, "instance", InstanceResult),
        field(event, "command", CommandResult),
        config.command_log_group,
        previous_progress(event),
    )


def previous_progress(event: Event) -> CompactionProgress | None:
    """The progress the last poll kept (`$.compaction`: null on the first poll)."""
    previous = optional_field(event, "compaction", CompactionResult)
    return previous["progress"] if previous else None
