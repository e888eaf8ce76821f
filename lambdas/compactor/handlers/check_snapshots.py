"""Task 7: progress of the new snapshots."""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import snapshots
from compactor.config import Config
from compactor.models import SnapshotsResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> SnapshotsResult:
    Config.from_env()  # fail fast on a broken environment, like every task
    return snapshots.check(cast(SnapshotsResult, event["snapshots"]))
