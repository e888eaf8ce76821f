"""resolve_batch (compactor/batch/): the batch input is checked with its schema and worded for
the user, a selector is resolved over every page of DescribeSnapshots / DescribeImages with
EC2's filters and the rest compared here, explicit items are kept as given (an id that does not
exist becomes a child that fails, not a failed batch), the count is capped, each child's input is
checked against the execution input's schema, names are deterministic, unique and valid, and
the largest batch stays well under Step Functions' 256 KiB."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from compactor import aws, contract, schemas
from compactor.batch import names
from compactor.errors import InvalidInput
from compactor.handlers import resolve_batch
from conftest import World
from support import amend, assert_valid, capture, respond

BATCH = "nightly-2026-11-23"
RESULT_SCHEMA = schemas.result_schema("resolve_batch")
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"


def resolve(world: World, batch_input: Any, name: str = BATCH) -> dict[str, Any]:
    result = resolve_batch.handler({"input": batch_input, "executionName": name}, world.context)
    assert_valid(result, RESULT_SCHEMA)
    return dict(result)


def refused(world: World, batch_input: Any) -> str:
    with pytest.raises(InvalidInput) as raised:
        resolve(world, batch_input)
    return str(raised.value)


def paged(world: World, operation: str, key: str, page_size: int = 2) -> list[dict[str, Any]]:
    """Answer `operation` as AWS does and moto does not: at most MaxResults per page (moto's
    answer to the same filters, cut), a NextToken while more remain, and a first page that is
    empty but has a NextToken (EC2 may answer so when it filters). Returns the calls."""
    moto = boto3.client("ec2", region_name=world.azs[0][:-1])

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        assert params.get("MaxResults"), "the call must page (MaxResults)"
        query = {k: v for k, v in params.items() if k not in ("MaxResults", "NextToken")}
        found = getattr(moto, _snake(operation))(**query)[key]
        token = params.get("NextToken")
        if token is None:
            return {key: [], "NextToken": "0"}
        start = int(token)
        page: dict[str, Any] = {key: found[start : start + page_size]}
        if start + page_size < len(found):
            page["NextToken"] = str(start + page_size)
        return page

    return respond(aws.ec2(), operation, answer)


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", operation).lower()


@pytest.fixture
def snapshots(world: World) -> Iterator[dict[str, str]]:
    """Five completed snapshots: three tagged team=web (sizes 8, 16, 32), one team=db, one
    untagged; and one output of an earlier compaction (this project's stack tag)."""
    made = {
        "web8": world.snapshot(size=8, tags={"team": "web"}),
        "web16": world.snapshot(size=16, tags={"team": "web"}),
        "web32": world.snapshot(size=32, tags={"team": "web"}),
        "db": world.snapshot(size=8, tags={"team": "db"}),
        "none": world.snapshot(size=8),
        "output": world.snapshot(
            size=8, tags={"team": "web", "ebs-snapshot-compactor:stack": "compactor-test"}
        ),
    }
    yield made


def ids(result: dict[str, Any]) -> list[str]:
    return [item["id"] for item in result["items"]]


def selection_order(world: World, snapshot_ids: list[str]) -> list[str]:
    """The order a selector lists snapshots in: oldest first, ties by id. Snapshots made one
    after another share their second unless the machine is busy (a fresh clone's CI run was)."""
    found = world.ec2.describe_snapshots(SnapshotIds=snapshot_ids)["Snapshots"]
    return [s["SnapshotId"] for s in sorted(found, key=lambda s: (s["StartTime"], s["SnapshotId"]))]


def test_a_tag_selector_reads_every_page_and_skips_this_projects_outputs(
    world: World, snapshots: dict[str, str]
) -> None:
    calls = paged(world, "DescribeSnapshots", "Snapshots")
    result = resolve(world, {"selector": {"tag": {"key": "team", "value": "web"}}})
    assert sorted(ids(result)) == sorted(
        [snapshots["web8"], snapshots["web16"], snapshots["web32"]]
    )
    selection = [c for c in calls if {"Name": "status", "Values": ["completed"]} in c["Filters"]]
    assert len(selection) == 3  # the empty first page, then two pages of two
    assert calls[0]["OwnerIds"] == ["self"]
    assert {"Name": "status", "Values": ["completed"]} in calls[0]["Filters"]
    assert {"Name": "tag:team", "Values": ["web"]} in calls[0]["Filters"]
    assert result["selectedBy"] == "selector" and result["count"] == 3
    assert all(item["kind"] == "snapshot" for item in result["items"])


def delivered_copy(world: World, source_tag: str, source_id: str, delivered: bool = True) -> str:
    """A compacted copy as a run leaves it: a snapshot (or, for an AMI source, an AMI) with this
    project's stack and lineage tags, tagged delivered once the run delivered it."""
    copy_tags = {"ebs-snapshot-compactor:stack": "compactor-test", source_tag: source_id}
    if delivered:
        copy_tags["ebs-snapshot-compactor:delivered"] = "true"
    if source_tag.endswith("source-image"):
        image_id = str(world.ec2.register_image(Name=f"copy-of-{source_id}")["ImageId"])
        world.ec2.create_tags(
            Resources=[image_id], Tags=[{"Key": k, "Value": v} for k, v in copy_tags.items()]
        )
        return image_id
    return world.snapshot(size=8, tags=copy_tags)


def test_a_repeated_selector_batch_leaves_out_what_it_compacted_already(
    world: World, snapshots: dict[str, str]
) -> None:
    """Issue #22, finding 5: sources with a delivered copy (lineage tag) are left out, named with
    their copies and the reason; an undelivered copy (a run in progress or failed) is not one;
    selector.includeCompacted selects them again."""
    lineage = "ebs-snapshot-compactor:source-snapshot"
    copy8 = delivered_copy(world, lineage, snapshots["web8"])
    delivered_copy(world, lineage, snapshots["web16"], delivered=False)
    image = world.ec2.register_image(Name="web-2026")["ImageId"]
    world.ec2.create_tags(Resources=[image], Tags=[{"Key": "team", "Value": "web"}])
    ami_copy = delivered_copy(world, "ebs-snapshot-compactor:source-image", image)
    selector: dict[str, Any] = {
        "resourceTypes": ["snapshot", "image"],
        "tag": {"key": "team", "value": "web"},
    }
    result = resolve(world, {"selector": selector})
    assert ids(result) == selection_order(world, [snapshots["web16"], snapshots["web32"]])
    skipped = result["alreadyCompacted"]
    assert skipped["count"] == 2
    assert skipped["sources"] == [
        {"id": snapshots["web8"], "kind": "snapshot", "copies": [copy8]},
        {"id": image, "kind": "image", "copies": [ami_copy]},
    ]
    assert "selector.includeCompacted" in skipped["reason"]
    again = resolve(world, {"selector": {**selector, "includeCompacted": True}})
    assert set(ids(again)) == {snapshots["web8"], snapshots["web16"], snapshots["web32"], image}
    assert again["alreadyCompacted"] is None
    # explicit items are compacted as listed
    listed = resolve(world, {"items": [{"snapshotId": snapshots["web8"]}]})
    assert ids(listed) == [snapshots["web8"]] and listed["alreadyCompacted"] is None


def test_the_limit_counts_what_is_left_after_leaving_out_the_compacted(
    world: World, snapshots: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet compacted long ago does not make the next batch too large: only the sources left
    to compact count against batchMaxItems, and at most that many left-out ones are listed."""
    monkeypatch.setitem(contract.limits()["batchMaxItems"], "value", 1)
    lineage = "ebs-snapshot-compactor:source-snapshot"
    delivered_copy(world, lineage, snapshots["web8"])
    delivered_copy(world, lineage, snapshots["web16"])
    result = resolve(world, {"selector": {"tag": {"key": "team", "value": "web"}}})
    assert ids(result) == [snapshots["web32"]]
    assert result["alreadyCompacted"]["count"] == 2
    assert len(result["alreadyCompacted"]["sources"]) == 1


def test_include_compacted_must_be_a_boolean(world: World) -> None:
    message = refused(world, {"selector": {"tag": {"key": "team"}, "includeCompacted": "yes"}})
    assert "selector.includeCompacted 'yes' is invalid: use true" in message


def test_a_tag_key_without_value_matches_any_value(world: World, snapshots: dict[str, str]) -> None:
    calls = paged(world, "DescribeSnapshots", "Snapshots")
    result = resolve(world, {"selector": {"tag": {"key": "team"}}})
    assert snapshots["db"] in ids(result) and snapshots["none"] not in ids(result)
    assert {"Name": "tag-key", "Values": ["team"]} in calls[0]["Filters"]


def test_min_size_and_created_before_are_compared_here(
    world: World, snapshots: dict[str, str]
) -> None:
    old = datetime(2025, 6, 1, tzinfo=UTC)

    def backdate(parsed: dict[str, Any]) -> None:
        for snapshot in parsed.get("Snapshots", []):
            if snapshot["SnapshotId"] in (snapshots["web8"], snapshots["web32"]):
                snapshot["StartTime"] = old

    amend(aws.ec2(), "DescribeSnapshots", backdate)
    selector = {"tag": {"key": "team", "value": "web"}, "createdBefore": "2026-01-01T00:00:00Z"}
    assert ids(resolve(world, {"selector": selector})) == sorted(
        [snapshots["web8"], snapshots["web32"]]
    )
    selector["minSizeGiB"] = 16
    assert ids(resolve(world, {"selector": selector})) == [snapshots["web32"]]
    in_a_year = (datetime.now(UTC) + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%S+02:00")
    everything = resolve(world, {"selector": {"tag": {"key": "team"}, "createdBefore": in_a_year}})
    assert len(everything["items"]) == 4


def test_images_are_selected_from_this_accounts_available_amis(
    world: World, snapshots: dict[str, str]
) -> None:
    tagged = world.ec2.register_image(Name="web-2026")["ImageId"]
    world.ec2.create_tags(Resources=[tagged], Tags=[{"Key": "team", "Value": "web"}])
    calls = paged(world, "DescribeImages", "Images", page_size=1)
    selector = {"resourceTypes": ["image", "snapshot"], "tag": {"key": "team", "value": "web"}}
    result = resolve(world, {"selector": selector})
    kinds = [(item["kind"], item["id"]) for item in result["items"]]
    # snapshots first, then AMIs; the stand-in base image has no team tag
    assert kinds[-1] == ("image", tagged) and [k for k, _ in kinds].count("image") == 1
    assert calls[0]["Owners"] == ["self"]
    assert {"Name": "state", "Values": ["available"]} in calls[0]["Filters"]
    assert result["items"][-1]["input"] == {"imageId": tagged}
    # moto registers every AMI with a 15 GiB root volume
    big = {"resourceTypes": ["image"], "tag": {"key": "team"}, "minSizeGiB": 16}
    assert resolve(world, {"selector": big})["items"] == []


def test_the_selector_order_is_stable(world: World, snapshots: dict[str, str]) -> None:
    first = resolve(world, {"selector": {"tag": {"key": "team"}}})
    again = resolve(world, {"selector": {"tag": {"key": "team"}}})
    assert first == again


def test_explicit_items_are_kept_as_given_without_looking_them_up(world: World) -> None:
    calls = respond(aws.ec2(), "DescribeSnapshots", lambda params: None)
    arn = "arn:aws:ec2:eu-west-1::snapshot/snap-0123456789abcdef1"
    batch_input = {
        "items": [
            {"snapshotId": "snap-0123456789abcdef0"},  # does not exist: its child fails
            {"imageId": "ami-0123456789abcdef0"},
            {"snapshotId": arn},  # another Region: its child fails (SnapshotInOtherRegion)
            {"snapshotId": "snap-0123456789abcdef0"},  # repeated: once
        ],
        "options": {"method": "trim", "tags": {"cost-centre": "42"}},
    }
    result = resolve(world, batch_input)
    assert calls == []
    assert ids(result) == [
        "snap-0123456789abcdef0",
        "ami-0123456789abcdef0",
        "snap-0123456789abcdef1",
    ]
    assert result["items"][1] == {
        "id": "ami-0123456789abcdef0",
        "kind": "image",
        "childName": result["items"][1]["childName"],
        "input": {
            "method": "trim",
            "tags": {"cost-centre": "42"},
            "imageId": "ami-0123456789abcdef0",
        },
        "estimate": None,
    }
    assert result["items"][2]["input"]["snapshotId"] == arn
    assert (result["selectedBy"], result["count"]) == ("items", 3)
    assert result["maxConcurrency"] == contract.limit("batchDefaultConcurrency")
    assert result["toleratedFailurePercentage"] == 100


def test_min_savings_percent_adds_a_dry_run_to_each_item(world: World) -> None:
    batch_input = {
        "items": [{"snapshotId": "snap-0123456789abcdef0"}],
        "minSavingsPercent": 20,
        "options": {"jobs": 8},
        "maxConcurrency": 5,
        "toleratedFailurePercentage": 10,
    }
    result = resolve(world, batch_input)
    item = result["items"][0]
    assert item["estimate"] == {
        "name": item["childName"] + "-dry",
        "input": {"jobs": 8, "snapshotId": "snap-0123456789abcdef0", "dryRun": True},
        "minSavingsPercent": 20,
    }
    assert (result["maxConcurrency"], result["toleratedFailurePercentage"]) == (5, 10)
    in_selector = resolve(world, {"selector": {"minSavingsPercent": 35}})
    # the world's stand-in AMI brought a snapshot of moto's
    assert in_selector["items"]
    assert all(i["estimate"]["minSavingsPercent"] == 35 for i in in_selector["items"])
    twice = {"selector": {"minSavingsPercent": 35}, "minSavingsPercent": 20}
    assert "minSavingsPercent is given twice" in refused(world, twice)


def test_names_are_deterministic_unique_and_valid() -> None:
    ids_ = [f"snap-{n:017x}" for n in range(contract.limit("batchMaxItems"))]
    long_odd = "Nächtlicher Lauf: alle/Snapshots (Team web) " * 3
    for batch_name in (BATCH, long_odd[:80], "x"):
        made = [names.child_name(batch_name, i, s) for i, s in enumerate(ids_)]
        assert made == [names.child_name(batch_name, i, s) for i, s in enumerate(ids_)]
        assert len(set(made)) == len(made)
        for name in made:
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,76}", name), name
            assert len(names.estimate_name(name)) <= 80
    # two batches whose names differ only after the head (or in a replaced character)
    assert names.child_name("a" * 40 + "1", 0, ids_[0]) != names.child_name(
        "a" * 40 + "2", 0, ids_[0]
    )
    assert names.child_name("run:1", 0, ids_[0]) != names.child_name("run/1", 0, ids_[0])
    assert names.child_name(BATCH, 7, ids_[0]).startswith(f"{BATCH}-")
    assert names.child_name(BATCH, 7, ids_[0]).endswith(f"-007-{ids_[0]}")


@pytest.mark.parametrize(
    ("batch_input", "words"),
    [
        ("snap-0123456789abcdef0", "the batch input must be a JSON object, got str"),
        ({}, "give exactly one of items (a list of snapshot/AMI ids) and selector (neither was"),
        (
            {"items": [{"snapshotId": "snap-0123456789abcdef0"}], "selector": {}},
            "(both were given)",
        ),
        ({"items": []}, "items is empty"),
        (
            {"items": [{"snapshotId": "snap-1"}]},
            "items: snapshotId 'snap-1' is neither a snapshot id",
        ),
        ({"items": [{"imageId": "img-1"}]}, "items: imageId 'img-1' is not an AMI id"),
        ({"items": [{"volumeId": "vol-1"}]}, "is not a source: each item is"),
        ({"selector": {"tags": {}}}, "unknown selector key(s) tags: allowed are createdBefore"),
        ({"selector": {}, "concurrency": 3}, "unknown batch input key(s) concurrency"),
        (
            {"selector": {"resourceTypes": ["volume"]}},
            "selector.resourceTypes ['volume'] is invalid",
        ),
        ({"selector": {"tag": {"value": "web"}}}, "selector.tag {'value': 'web'} is invalid"),
        (
            {"selector": {"createdBefore": "yesterday"}},
            "selector.createdBefore 'yesterday' is invalid",
        ),
        ({"selector": {"createdBefore": "2026-02-30T00:00:00Z"}}, "is not a real date"),
        ({"selector": {"minSizeGiB": 0}}, "selector.minSizeGiB 0 is invalid"),
        (
            {"selector": {}, "minSavingsPercent": 120},
            "minSavingsPercent 120 is invalid: use a number 0-100",
        ),
        (
            {"selector": {}, "maxConcurrency": 0},
            "maxConcurrency 0 is invalid: use a whole number 1-",
        ),
        ({"selector": {}, "maxConcurrency": 21}, "maxConcurrency 21 is invalid"),
        (
            {"selector": {}, "toleratedFailurePercentage": -1},
            "toleratedFailurePercentage -1 is invalid",
        ),
        ({"selector": {}, "options": {"imageName": "web"}}, "options must not set imageName"),
        (
            {"selector": {}, "options": {"snapshotId": "snap-0123456789abcdef0"}},
            "options must not set snapshotId",
        ),
    ],
)
def test_a_bad_batch_input_is_refused_in_words(world: World, batch_input: Any, words: str) -> None:
    assert words in refused(world, batch_input)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (
            {"jobs": 0},
            "item 0 (snap-0123456789abcdef0): jobs 0 is invalid: use a whole number 1-64",
        ),
        ({"metod": "trim"}, "item 0 (snap-0123456789abcdef0): unknown input key(s) metod"),
        (
            {"tags": {"aws:x": "1"}},
            "keys starting with aws: or ebs-snapshot-compactor: are reserved",
        ),
        ({"tags": {"compact": "yes"}}, "is the trigger tag"),
    ],
)
def test_a_bad_option_fails_the_batch_before_any_child(
    world: World, options: dict[str, Any], words: str
) -> None:
    batch_input = {"items": [{"snapshotId": "snap-0123456789abcdef0"}], "options": options}
    assert words in refused(world, batch_input)


def test_the_batch_input_schema_restates_the_limit() -> None:
    schema = schemas.load("batch-input.schema.json")
    assert schema["properties"]["maxConcurrency"]["maximum"] == contract.limit(
        "batchMaxConcurrency"
    )
    assert contract.limit("batchDefaultConcurrency") <= contract.limit("batchMaxConcurrency")


def test_more_items_than_the_limit_are_refused_naming_the_count(world: World) -> None:
    most = contract.limit("batchMaxItems")
    too_many = [{"snapshotId": f"snap-{n:017x}"} for n in range(most + 1)]
    message = refused(world, {"items": too_many})
    assert f"items lists {most + 1} items; a batch takes at most {most}" in message
    assert "split it into batches" in message


def test_a_selector_matching_more_than_the_limit_is_refused(
    world: World, snapshots: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(contract.limits()["batchMaxItems"], "value", 2)
    message = refused(world, {"selector": {"tag": {"key": "team", "value": "web"}}})
    assert "the selector matches 3 items; a batch takes at most 2" in message
    assert "narrow the selector" in message


def test_the_largest_batch_stays_well_under_the_payload_limit(world: World) -> None:
    """batchMaxItems items with the longest ids, a long batch name, a dry run each and the
    options a pipeline typically passes: the state at the Map (input + $.batch) is measured."""
    most = contract.limit("batchMaxItems")
    batch_input = {
        "items": [
            {"snapshotId": f"arn:aws:ec2:us-east-1:123456789012:snapshot/snap-{n:017x}"}
            for n in range(most)
        ],
        "minSavingsPercent": 20,
        "options": {
            "method": "trim",
            "jobs": 32,
            "verify": True,
            "kmsKeyId": KEY_ARN,
            "tags": {"team": "platform", "cost-centre": "4711", "pipeline": "golden-ami"},
        },
        "maxConcurrency": 20,
    }
    result = resolve(world, batch_input, name="b" * 80)
    size = len(json.dumps({**batch_input, "batch": result}, separators=(",", ":")))
    limit = contract.limit("statePayloadMaxBytes")
    print(f"state at the Map for {most} items: {size} bytes of {limit}")
    assert result["count"] == most
    assert size < limit * 0.75


def test_options_too_large_for_the_payload_are_refused_with_a_way_out(world: World) -> None:
    tags = {f"key-{n:02d}-" + "k" * 100: "v" * 256 for n in range(40)}
    batch_input = {
        "items": [{"snapshotId": f"snap-{n:017x}"} for n in range(50)],
        "options": {"tags": tags},
    }
    message = refused(world, batch_input)
    assert "the batch's 50 items with these options make" in message
    assert "split it into batches of about" in message


# --- EBS's pending snapshots quota (compactor/batch/pending.py) -------------------------------


def _amis(volumes: dict[str, int]) -> list[dict[str, Any]]:
    """AMIs as DescribeImages describes them: id -> its EBS volumes from snapshots (plus an
    ephemeral mapping, which starts no snapshot)."""
    return [
        {
            "ImageId": image_id,
            "State": "available",
            "BlockDeviceMappings": [
                *(
                    {
                        "DeviceName": f"/dev/xvd{chr(97 + n)}",
                        "Ebs": {"SnapshotId": f"snap-{n:017x}"},
                    }
                    for n in range(count)
                ),
                {"DeviceName": "/dev/sdx", "VirtualName": "ephemeral0"},
            ],
        }
        for image_id, count in volumes.items()
    ]


def _serve_amis(volumes: dict[str, int]) -> list[dict[str, Any]]:
    """Answer DescribeImages' image-id filter with the AMIs of `volumes` it names (an id not
    there does not exist); returns the calls."""
    images = _amis(volumes)

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        (wanted,) = [f["Values"] for f in params["Filters"] if f["Name"] == "image-id"]
        assert "ImageIds" not in params, "an id that does not exist must not fail the call"
        return {"Images": [i for i in images if i["ImageId"] in wanted]}

    return respond(aws.ec2(), "DescribeImages", answer)


def _ami_id(n: int) -> str:
    return f"ami-{n:017x}"


def _ami_batch(volumes: list[int], **batch: Any) -> tuple[dict[str, Any], dict[str, int]]:
    counts = {_ami_id(n): v for n, v in enumerate(volumes)}
    return {"items": [{"imageId": i} for i in counts], **batch}, counts


def test_a_batch_that_could_pass_the_pending_snapshots_quota_is_refused(world: World) -> None:
    """12 AMIs of 10 volumes, 12 at once: up to 120 direct snapshots pending, over EBS's 100."""
    assert contract.limit("ebsPendingSnapshotsPerAccount") == 100
    batch_input, counts = _ami_batch([10] * 12, maxConcurrency=12)
    calls = _serve_amis(counts)
    message = refused(world, batch_input)
    assert "with maxConcurrency 12 this batch could hold 120 snapshots pending at once" in message
    assert "quota of 100 pending snapshots per account" in message
    assert "give maxConcurrency 10 or less" in message
    assert len(calls) == 1
    # 10 at once is 100: fits
    assert resolve(world, {**batch_input, "maxConcurrency": 10})["count"] == 12


@pytest.mark.parametrize(
    ("volumes", "batch", "fits"),
    [
        # the largest items count: one AMI of 10 and many of 1, 20 at once: 10 + 19 = 29
        ([10] + [1] * 30, {"maxConcurrency": 20}, True),
        # 11 AMIs of 10 and 9 of 1, 20 at once: 110 + 9 = 119
        ([10] * 11 + [1] * 9, {"maxConcurrency": 20}, False),
        # dry runs and target volume start no snapshot with StartSnapshot
        ([10] * 20, {"maxConcurrency": 20, "options": {"dryRun": True}}, True),
        ([10] * 20, {"maxConcurrency": 20, "options": {"target": "volume"}}, True),
        ([10] * 20, {"maxConcurrency": 20, "options": {"method": "trim"}}, True),
        # an estimate first does not change what the compaction child starts
        ([10] * 20, {"maxConcurrency": 20, "minSavingsPercent": 10}, False),
    ],
)
def test_the_pending_bound_counts_what_the_running_children_start(
    world: World, volumes: list[int], batch: dict[str, Any], fits: bool
) -> None:
    batch_input, counts = _ami_batch(volumes, **batch)
    _serve_amis(counts)
    if fits:
        assert resolve(world, batch_input)["count"] == len(volumes)
    else:
        assert "snapshots pending at once" in refused(world, batch_input)


def test_an_ami_not_found_or_with_too_many_volumes_counts_nothing(world: World) -> None:
    """Their children fail in prepare (ImageNotFound, TooManyVolumes) before any StartSnapshot."""
    batch_input, counts = _ami_batch([10] * 9 + [11] * 5 + [10] * 5, maxConcurrency=20)
    for missing in range(14, 19):
        del counts[_ami_id(missing)]
    _serve_amis(counts)
    # counted: the 9 AMIs of 10 (90); 5 of 11 volumes and 5 missing would make 140 if counted
    assert resolve(world, batch_input)["count"] == 19


def test_snapshots_alone_never_look_up_anything(world: World) -> None:
    batch_input = {
        "items": [{"snapshotId": f"snap-{n:017x}"} for n in range(30)],
        "maxConcurrency": contract.limit("batchMaxConcurrency"),
    }
    calls = capture(aws.ec2(), "DescribeImages")
    assert resolve(world, batch_input)["count"] == 30
    assert calls == []
