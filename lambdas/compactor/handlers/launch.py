"""Task 2: launch the transfer instance with its root and blank target volumes (the source
volumes are created and attached after it is online: attach_volumes)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.boundary import field
from compactor.config import Config
from compactor.ec2 import launch
from compactor.models import InstanceResult, Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> InstanceResult:
    return launch.launch(
        field(event, "plan", Plan),
        int(event.get("launchAttempt", 1)),
        Config.from_env(task="launch"),
    )
