"""Batch task 2: read the Distributed Map's results (its ResultWriter files in S3), write the
batch report to `batches/<batch execution name>/batch-report.json` in the batch results bucket,
announce it on EventBridge ("EBS Snapshot Compaction Batch Completed") and return the summary.
Runs after the Map succeeded (`map`) and after it failed (`mapError`, results maybe missing)."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor.batch import summarize
from compactor.config import Config
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> dict[str, object]:
    return summarize.summarize(event, Config.from_env(task="summarize_batch"))
