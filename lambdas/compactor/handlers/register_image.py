"""Task 8: register the AMI equivalent to the source AMI, on the new snapshots.
For a snapshot job (no source AMI) it registers nothing and returns imageId null."""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import images
from compactor.config import Config
from compactor.models import ImageResult, Plan, SnapshotsResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> ImageResult:
    snapshots = cast(SnapshotsResult, event["snapshots"])
    return images.register(cast(Plan, event["plan"]), snapshots["snapshots"], Config.from_env())
