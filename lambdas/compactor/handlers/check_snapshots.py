"""Task 7: progress of the new snapshots."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import snapshots
from compactor.boundary import snapshots_field
from compactor.models import SnapshotsResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> SnapshotsResult:
    return snapshots.check(snapshots_field(event))
