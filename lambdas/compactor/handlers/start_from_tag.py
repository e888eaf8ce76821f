"""The tag trigger: EC2 "Tag Change on Resource" event of a snapshot → StartExecution of the main
state machine, once per snapshot and trigger-tag value (compactor/trigger.py). Not a task of the
state machine: an EventBridge rule invokes it with the whole event."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import trigger
from compactor.models import StartFromTagResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> StartFromTagResult:
    return trigger.start(event, trigger.TriggerConfig.from_env())
