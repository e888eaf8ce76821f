"""Task 3: is the transfer instance running and SSM-managed? (attach_volumes follows.)"""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.boundary import field
from compactor.ec2 import instances
from compactor.models import InstanceResult, Plan, ReadyResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> ReadyResult:
    return instances.check(field(event, "plan", Plan), field(event, "instance", InstanceResult))
