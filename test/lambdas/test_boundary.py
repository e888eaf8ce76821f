"""compactor.boundary: a handler's payload is checked against the schema its type was generated
from and returned as it is; what does not follow it is InvalidInput naming the key, the type, the
schema part and the first failing value."""

from __future__ import annotations

from typing import Any

import pytest
from compactor import boundary, errors, models
from support import instance_result, plan_of

PLAN = plan_of("exec-1", [{"index": 0, "sourceSnapshotId": "snap-0123456789abcdef0"}])
NEW = {
    "snapshots": [
        {"index": 0, "snapshotId": "snap-1", "sourceSnapshotId": "snap-0", "deviceName": None}
    ]
}


def test_a_valid_payload_is_returned_as_it_is() -> None:
    event = {"plan": PLAN, "instance": instance_result("i-0123456789abcdef0")}
    assert boundary.field(event, "plan", models.Plan) is PLAN
    assert boundary.field(event, "instance", models.InstanceResult)["market"] == "spot"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"jobs": "16"}, "plan.jobs must be integer"),
        ({"volumes": []}, "plan.volumes must contain at least 1 items"),
        ({"surprise": 1}, "plan must not contain {'surprise'} properties"),
    ],
)
def test_a_payload_the_schema_refuses_names_key_type_schema_and_failure(
    change: dict[str, Any], named: str
) -> None:
    with pytest.raises(errors.InvalidInput) as caught:
        boundary.field({"plan": PLAN | change}, "plan", models.Plan)
    message = str(caught.value)
    assert message.startswith("'plan' is not a Plan (plan.schema.json: "), message
    assert named in message and message.endswith("a workflow bug"), message


def test_a_missing_key_is_named_with_the_keys_there_are() -> None:
    with pytest.raises(errors.InvalidInput, match=r"no 'attached' \(keys: \['plan'\]\)"):
        boundary.field({"plan": PLAN}, "attached", models.AttachResult)


def test_a_nested_part_is_checked_against_its_definition() -> None:
    with pytest.raises(errors.InvalidInput, match=r"plan.schema.json#/definitions/volume: "):
        boundary.check({"index": 0}, models.VolumePlan, "volume")


@pytest.mark.parametrize("event", [{}, {"sourceBlocks": None}])
def test_an_absent_or_null_optional_key_is_none(event: dict[str, Any]) -> None:
    assert boundary.optional_field(event, "sourceBlocks", models.SourceBlocksResult) is None


def test_snapshots_are_create_snapshots_or_check_snapshots_result() -> None:
    assert boundary.snapshots_field({"snapshots": NEW}) is NEW
    checked = NEW | {"completed": False}
    assert boundary.snapshots_field({"snapshots": checked}) is checked
    with pytest.raises(errors.InvalidInput, match="'snapshots' is not a SnapshotsResult"):
        boundary.snapshots_field({"snapshots": NEW | {"completed": "yes"}})
