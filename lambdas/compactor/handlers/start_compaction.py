"""Task 4: run the Command document that copies each source volume sparsely to its target
(target snapshot: starts the direct snapshots first; `launchAttempt` names them)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.boundary import field
from compactor.config import Config
from compactor.models import AttachResult, CommandResult, InstanceResult, Plan, SourceBlocksResult
from compactor.observability import Event, task_handler
from compactor.ssm import commands


@task_handler
def handler(event: Event, context: LambdaContext) -> CommandResult:
    return commands.start(
        field(event, "plan", Plan),
        field(event, "instance", InstanceResult),
        field(event, "attached", AttachResult),
        field(event, "sourceBlocks", SourceBlocksResult),
        Config.from_env(task="start_compaction"),
        int(event.get("launchAttempt", 1)),
    )
