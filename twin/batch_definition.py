"""The batch workflow the twin runs: the template's (the machine of the BatchStateMachineArn
output, lib/batch-workflow.ts), or, for a template without one, a hand-written definition of the
plan's shape (issue #10) whose resolve and summarize steps are Pass states: the twin's batch input
then carries the resolved `batch` itself (resolve_batch's result shape)."""

from __future__ import annotations

import re
from typing import Any

from .execution import Machine

HANDWRITTEN_NAME = "twin-batch-handwritten"
RESULTS_PREFIX = "batches/"
CHILD_SELECTOR = {
    "Output.$": "$.Output",
    "ExecutionArn.$": "$.ExecutionArn",
    "Status.$": "$.Status",
    "StartDate.$": "$.StartDate",
    "StopDate.$": "$.StopDate",
}


def _start(
    main_arn: str, name_path: str, input_path: str, result_path: str, nxt: str
) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::states:startExecution.sync:2",
        "Parameters": {"StateMachineArn": main_arn, "Name.$": name_path, "Input.$": input_path},
        "ResultSelector": CHILD_SELECTOR,
        "ResultPath": result_path,
        "Next": nxt,
    }


def _processor(main_arn: str) -> dict[str, Any]:
    worth = {
        "Variable": "$.estimated.Output.estimate.savingsPercent",
        "NumericGreaterThanEqualsPath": "$.estimate.minSavingsPercent",
        "Next": "Compact",
    }
    return {
        "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
        "StartAt": "Estimate first?",
        "States": {
            "Estimate first?": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.estimate.name", "IsPresent": True, "Next": "Estimate"}],
                "Default": "Compact",
            },
            "Estimate": _start(
                main_arn, "$.estimate.name", "$.estimate.input", "$.estimated", "Worth compacting?"
            ),
            "Worth compacting?": {
                "Type": "Choice",
                "Choices": [worth],
                "Default": "Not worth compacting",
            },
            "Not worth compacting": {
                "Type": "Pass",
                "Result": True,
                "ResultPath": "$.skipped",
                "Next": "Item done",
            },
            "Compact": _start(main_arn, "$.childName", "$.input", "$.compacted", "Item done"),
            "Item done": {"Type": "Succeed"},
        },
    }


def handwritten(main_arn: str, bucket: str) -> dict[str, Any]:
    """The plan's batch workflow with Pass states for resolve_batch and summarize_batch."""
    return {
        "StartAt": "Resolve batch",
        "States": {
            "Resolve batch": {"Type": "Pass", "Next": "Compact each item"},
            "Compact each item": {
                "Type": "Map",
                "ItemProcessor": _processor(main_arn),
                "ItemsPath": "$.batch.items",
                "MaxConcurrencyPath": "$.batch.maxConcurrency",
                "ToleratedFailurePercentagePath": "$.batch.toleratedFailurePercentage",
                "ResultWriter": {
                    "Resource": "arn:aws:states:::s3:putObject",
                    "Parameters": {"Bucket": bucket, "Prefix": RESULTS_PREFIX},
                },
                "ResultPath": "$.map",
                "Catch": [
                    {
                        "ErrorEquals": ["States.ALL"],
                        "ResultPath": "$.mapError",
                        "Next": "Summarize failed batch",
                    }
                ],
                "Next": "Summarize batch",
            },
            "Summarize batch": {"Type": "Pass", "Next": "Batch done"},
            "Batch done": {"Type": "Succeed"},
            "Summarize failed batch": {"Type": "Pass", "Next": "Batch failed"},
            "Batch failed": {
                "Type": "Fail",
                "Error": "States.ExceedToleratedFailureThreshold",
                "Cause": "the Map Run failed (hand-written batch workflow)",
            },
        },
    }


def handwritten_machine(region: str, account: str, main_arn: str, bucket: str) -> Machine:
    arn = f"arn:aws:states:{region}:{account}:stateMachine:{HANDWRITTEN_NAME}"
    return Machine("TwinHandwrittenBatch", arn, HANDWRITTEN_NAME, handwritten(main_arn, bucket))


def child_name(batch_name: str, index: int, item_id: str) -> str:
    """A deterministic child execution name (<= 80 chars of [A-Za-z0-9_-])."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{batch_name}-{index}-{item_id}")
    return name[:80]


def resolved(
    batch_name: str, ids: list[str], max_concurrency: int, tolerated: int
) -> dict[str, Any]:
    """What resolve_batch would return for explicit snapshot items (the hand-written workflow's
    input carries it as `batch`)."""
    items = [
        {
            "id": sid,
            "kind": "snapshot",
            "childName": child_name(batch_name, i, sid),
            "input": {"snapshotId": sid},
            "estimate": None,
        }
        for i, sid in enumerate(ids)
    ]
    return {
        "executionName": batch_name,
        "selectedBy": "items",
        "count": len(items),
        "maxConcurrency": max_concurrency,
        "toleratedFailurePercentage": tolerated,
        "items": items,
        "alreadyCompacted": None,
    }
