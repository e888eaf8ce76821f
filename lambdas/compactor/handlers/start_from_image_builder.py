"""The Image Builder trigger: an "EC2 Image Builder Image State Change" event (AVAILABLE) of an
image built by one of the stack's `imageBuilderPipelineArns` → one StartExecution of the main
state machine per AMI of this Region and account (compactor/image_builder_trigger.py). Not a task
of the state machine: an EventBridge rule invokes it with the whole event; the stack creates it
only when imageBuilderPipelineArns is set."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import image_builder_trigger
from compactor.models import StartFromImageBuilderResult
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> StartFromImageBuilderResult:
    config = image_builder_trigger.ImageBuilderConfig.from_env()
    return image_builder_trigger.start(event, config)
