"""Task 6: snapshot each compacted target volume."""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import snapshots
from compactor.config import Config
from compactor.models import AttachResult, NewSnapshots, Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> NewSnapshots:
    attached = cast(AttachResult, event["attached"])
    return {
        "snapshots": snapshots.create_from_targets(
            cast(Plan, event["plan"]), attached["volumes"], Config.from_env(task="create_snapshots")
        )
    }
