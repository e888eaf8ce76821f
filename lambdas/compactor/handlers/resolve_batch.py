"""Batch task 1: validate the batch input and resolve it into the Distributed Map's items (one
child execution each; compactor/batch/resolve.py). Creates nothing."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.batch import resolve
from compactor.config import Config
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> dict[str, object]:
    config = Config.from_env(task="resolve_batch")
    return resolve.resolve(
        event.get("input"), event.get("executionName", ""), config.trigger_tag_key
    )
