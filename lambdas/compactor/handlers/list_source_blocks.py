"""Task 1b: list the blocks each source snapshot holds into the stack's bucket (call until done)."""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import source_blocks
from compactor.config import Config
from compactor.models import Plan, SourceBlocksResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> SourceBlocksResult:
    return source_blocks.list_blocks(
        cast(Plan, event["plan"]),
        cast("SourceBlocksResult | None", event.get("sourceBlocks")),
        Config.from_env(task="list_source_blocks").source_blocks_bucket,
    )
