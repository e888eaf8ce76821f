"""Task 8: register the AMI equivalent to the source AMI, on the new snapshots, and with
`copySharing` give it (and the new snapshots) the source's sharing and deprecation time
(compactor/sharing.py). For a snapshot job (no source AMI) it registers nothing and returns
imageId null."""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import images, sharing
from compactor.config import Config
from compactor.models import ImageResult, Plan, SnapshotsResult
from compactor.observability import Event, task_handler

# what a context without get_remaining_time_in_millis (a test's) is taken to have left
DEFAULT_SECONDS_LEFT = 60.0


@task_handler
def handler(event: Event, context: LambdaContext) -> ImageResult:
    plan = cast(Plan, event["plan"])
    snapshots = cast(SnapshotsResult, event["snapshots"])["snapshots"]
    result = images.register(plan, snapshots, Config.from_env())
    if not plan.get("copySharing") or result["imageId"] is None or plan["image"] is None:
        return result
    copied = sharing.copy(
        plan["image"]["imageId"], result["imageId"], snapshots, _seconds_left(context)
    )
    result["sharing"] = copied
    result["warnings"] = [*result["warnings"], *copied["warnings"]]
    return result


def _seconds_left(context: LambdaContext) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining() / 1000.0 if callable(remaining) else DEFAULT_SECONDS_LEFT
