"""The sweeper (not a task of a state machine): an EventBridge schedule invokes it every
sweepIntervalMinutes; it tears down what ended executions left behind (compactor/sweeper.py),
emits ResourcesSwept and SweepRemaining, and publishes the Swept event when it did something."""

from datetime import UTC, datetime

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import sweeper
from compactor.observability import Event, emit, logger, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> sweeper.SweepResult:
    config = sweeper.SweepConfig.from_env()
    result = sweeper.sweep(config, datetime.now(UTC))
    emit("ResourcesSwept", result["removed"])
    emit("SweepRemaining", result["remaining"])
    logger.info(
        "sweep done",
        extra={
            "removed": result["removed"],
            "remaining": result["remaining"],
            "executions": len(result["executions"]),
            "untracked": len(result["untracked"]),
        },
    )
    sweeper.publish(result, config.event_bus_name)
    return result
