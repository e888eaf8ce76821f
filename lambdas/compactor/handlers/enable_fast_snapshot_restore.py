"""Task 9: enable fast snapshot restore on the new snapshots in the AZs of the input.
With no AZs in the input it enables nothing and returns no states."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from compactor import fast_snapshot_restore
from compactor.boundary import field, snapshots_field
from compactor.models import FastSnapshotRestoreResult, Plan
from compactor.observability import Event, task_handler


@task_handler
def handler(event: Event, context: LambdaContext) -> FastSnapshotRestoreResult:
    plan = field(event, "plan", Plan)
    azs = plan["fastSnapshotRestoreAzs"]
    snapshot_ids = [s["snapshotId"] for s in snapshots_field(event)["snapshots"]]
    if not azs or not snapshot_ids:
        return {"states": []}
    return {"states": fast_snapshot_restore.enable(snapshot_ids, azs)}
