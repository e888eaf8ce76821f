"""Task 10: delete what this execution created (by its tags); call again until remaining is 0."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import teardown
from compactor.config import Config
from compactor.models import TeardownResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> TeardownResult:
    config = Config.from_env(task="teardown")
    return teardown.teardown(
        config.stack_name,
        str(event.get("executionName") or ""),
        str(event.get("outcome") or ""),
        teardown.parse_keep(event.get("keep")),
        config.source_blocks_bucket,
    )
