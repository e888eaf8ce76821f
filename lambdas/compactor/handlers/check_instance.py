"""Task 3: is the transfer instance running and SSM-managed? (attach_volumes follows.)"""

from typing import cast

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.ec2 import instances
from compactor.models import InstanceResult, Plan, ReadyResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> ReadyResult:
    return instances.check(cast(Plan, event["plan"]), cast(InstanceResult, event["instance"]))
