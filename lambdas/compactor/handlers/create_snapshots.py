"""Task 6: snapshot each compacted target volume."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import snapshots
from compactor.boundary import field
from compactor.config import Config
from compactor.models import AttachResult, NewSnapshots, Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> NewSnapshots:
    attached = field(event, "attached", AttachResult)
    return {
        "snapshots": snapshots.create_from_targets(
            field(event, "plan", Plan),
            attached["volumes"],
            Config.from_env(task="create_snapshots"),
        )
    }
