"""Task 3b: create the source volumes in the instance's AZ and attach them (one step per call)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.boundary import field
from compactor.config import Config
from compactor.ec2 import attach
from compactor.models import AttachResult, InstanceResult, Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> AttachResult:
    return attach.attach(
        field(event, "plan", Plan),
        field(event, "instance", InstanceResult),
        Config.from_env(task="attach_volumes"),
    )
