from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.handlers import enable_fast_snapshot_restore
from conftest import World
from support import plan_of, respond

PLAN = plan_of(
    "exec-1",
    [{"index": 0, "sourceSnapshotId": "snap-1"}],
    fastSnapshotRestoreAzs=["us-east-1a", "us-east-1b"],
)
SNAPSHOTS = {
    "snapshots": [
        {
            "index": 0,
            "snapshotId": "snap-0000000000000000a",
            "sourceSnapshotId": "snap-1",
            "deviceName": None,
        }
    ],
    "completed": True,
}


def run(world: World, plan: dict[str, Any]) -> dict[str, Any]:
    return enable_fast_snapshot_restore.handler(
        {"plan": plan, "snapshots": SNAPSHOTS}, world.context
    )


def test_enables_in_every_az_of_the_input(world: World) -> None:
    # EnableFastSnapshotRestores is not in moto
    calls = respond(
        aws.ec2(),
        "EnableFastSnapshotRestores",
        lambda params: {
            "Successful": [
                {"SnapshotId": s, "AvailabilityZone": az, "State": "enabling"}
                for s in params["SourceSnapshotIds"]
                for az in params["AvailabilityZones"]
            ],
            "Unsuccessful": [],
        },
    )
    assert run(world, PLAN) == {
        "states": [
            {
                "snapshotId": "snap-0000000000000000a",
                "availabilityZone": "us-east-1a",
                "state": "enabling",
            },
            {
                "snapshotId": "snap-0000000000000000a",
                "availabilityZone": "us-east-1b",
                "state": "enabling",
            },
        ]
    }
    assert calls == [
        {
            "AvailabilityZones": ["us-east-1a", "us-east-1b"],
            "SourceSnapshotIds": ["snap-0000000000000000a"],
        }
    ]


def test_no_azs_enables_nothing(world: World) -> None:
    calls = respond(aws.ec2(), "EnableFastSnapshotRestores", lambda _: {"Successful": []})
    assert run(world, PLAN | {"fastSnapshotRestoreAzs": []}) == {"states": []}
    assert calls == []


def unsuccessful(code: str, message: str) -> None:
    respond(
        aws.ec2(),
        "EnableFastSnapshotRestores",
        lambda params: {
            "Successful": [],
            "Unsuccessful": [
                {
                    "SnapshotId": params["SourceSnapshotIds"][0],
                    "FastSnapshotRestoreStateErrors": [
                        {
                            "AvailabilityZone": "us-east-1a",
                            "Error": {"Code": code, "Message": message},
                        }
                    ],
                }
            ],
        },
    )


def test_limit_reached_meanwhile(world: World) -> None:
    unsuccessful("FastSnapshotRestoreLimitExceeded", "limit of 5 exceeded")
    with pytest.raises(errors.FastSnapshotRestoreLimitExceeded, match=r"us-east-1a.*limit of 5"):
        run(world, PLAN)


def test_other_failures_are_raised_with_their_reason(world: World) -> None:
    unsuccessful("InvalidSnapshot.NotFound", "gone")
    with pytest.raises(RuntimeError, match=r"InvalidSnapshot.NotFound: gone"):
        run(world, PLAN)
