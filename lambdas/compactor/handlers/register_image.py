"""Task 8: register the AMI equivalent to the source AMI, on the new snapshots, and with
`copySharing` give it (and the new snapshots) the source's sharing and deprecation time
(compactor/sharing.py); sharing it could not copy raises SharingNotCopied (the workflow then
fails the run as ImageNotDelivered). For a snapshot job (no source AMI) it registers nothing and
returns imageId null."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import images, sharing
from compactor.boundary import field, snapshots_field
from compactor.config import Config
from compactor.errors import SharingNotCopied
from compactor.models import ImageResult, Plan
from compactor.observability import Event, task_handler

# what a context without get_remaining_time_in_millis (a test's) is taken to have left
DEFAULT_SECONDS_LEFT = 60.0


@task_handler
def handler(event: Event, context: LambdaContext) -> ImageResult:
    plan = field(event, "plan", Plan)
    snapshots = snapshots_field(event)["snapshots"]
    result = images.register(plan, snapshots, Config.from_env(task="register_image"))
    if not plan.get("copySharing") or result["imageId"] is None or plan["image"] is None:
        return result
    copied = sharing.copy(
        plan["image"]["imageId"], result["imageId"], snapshots, _seconds_left(context)
    )
    if copied["warnings"]:
        # the sharing is part of what the input asked for: the run fails, naming what exists
        raise SharingNotCopied(
            f"the AMI {result['imageId']} is registered on the delivered snapshots, but the "
            f"source's sharing (copySharing) was not all copied: {'; '.join(copied['warnings'])}. "
            "The AMI and its snapshots are kept: share them by hand"
        )
    result["sharing"] = copied
    return result


def _seconds_left(context: LambdaContext) -> float:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return remaining() / 1000.0 if callable(remaining) else DEFAULT_SECONDS_LEFT
