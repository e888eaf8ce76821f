"""Task 5: has the Command document finished, and with what summary? How far has it got?"""

from typing import Any, cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.config import Config
from compactor.models import CommandResult, CompactionProgress, CompactionResult, InstanceResult
from compactor.observability import Event, task_handler
from compactor.ssm import commands


@task_handler
def handler(event: Event, context: LambdaContext) -> CompactionResult:
    config = Config.from_env(task="check_compaction")
    return commands.check(
        cast(InstanceResult, event["instance"]),
        cast(CommandResult, event["command"]),
        config.command_log_group,
        previous_progress(event.get("compaction")),
    )


def previous_progress(previous: Any) -> CompactionProgress | None:
    """The progress the last poll kept (`$.compaction`: null on the first poll)."""
    if isinstance(previous, dict) and isinstance(previous.get("progress"), dict):
        return cast(CompactionProgress, previous["progress"])
    return None
