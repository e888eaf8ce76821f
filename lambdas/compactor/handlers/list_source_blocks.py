"""Task 1b: list the blocks each source snapshot holds into the stack's bucket (call until done)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import source_blocks
from compactor.boundary import field, optional_field
from compactor.config import Config
from compactor.models import Plan, SourceBlocksResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> SourceBlocksResult:
    return source_blocks.list_blocks(
        field(event, "plan", Plan),
        optional_field(event, "sourceBlocks", SourceBlocksResult),
        Config.from_env(task="list_source_blocks").source_blocks_bucket,
    )
