from twin.eventbridge import json_path, matches, transform

EVENT = {
    "version": "0",
    "id": "1",
    "detail-type": "Tag Change on Resource",
    "source": "aws.tag",
    "account": "123456789012",
    "time": "2026-01-01T00:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:ec2:us-east-1:123456789012:snapshot/snap-1"],
    "detail": {
        "changed-tag-keys": ["compact"],
        "service": "ec2",
        "resource-type": "snapshot",
        "version": 1,
        "tags": {"compact": "true", "team": "x"},
    },
}
PATTERN = {
    "source": ["aws.tag"],
    "detail-type": ["Tag Change on Resource"],
    "detail": {
        "service": ["ec2"],
        "resource-type": ["snapshot"],
        "changed-tag-keys": ["compact"],
        "tags": {"compact": [{"exists": True}], "lineage": [{"exists": False}]},
    },
}


def test_pattern_matches_the_tag_event_and_not_others() -> None:
    assert matches(PATTERN, EVENT)
    other_key = {**EVENT, "detail": {**EVENT["detail"], "changed-tag-keys": ["team"]}}
    assert not matches(PATTERN, other_key)
    with_lineage = {
        **EVENT,
        "detail": {**EVENT["detail"], "tags": {"compact": "true", "lineage": "snap-0"}},
    }
    assert not matches(PATTERN, with_lineage)


def test_unquoted_placeholder_inserts_json_and_quoted_inserts_text() -> None:
    target = {
        "InputTransformer": {
            "InputPathsMap": {"r": "$.resources[0]", "tags": "$.detail.tags"},
            "InputTemplate": '{"snapshotId":<r>,"note":"tagged <r>","tags":<tags>}',
        }
    }
    result = transform(target, EVENT, "arn:rule", "rule")
    assert result == {
        "snapshotId": "arn:aws:ec2:us-east-1:123456789012:snapshot/snap-1",
        "note": "tagged arn:aws:ec2:us-east-1:123456789012:snapshot/snap-1",
        "tags": {"compact": "true", "team": "x"},
    }


def test_missing_path_is_null_outside_quotes() -> None:
    target = {
        "InputTransformer": {
            "InputPathsMap": {"m": "$.detail.missing"},
            "InputTemplate": '{"a":<m>,"b":"<m>"}',
        }
    }
    assert transform(target, EVENT, "arn", "n") == {"a": None, "b": ""}


def test_json_path_indexes_and_dashes() -> None:
    assert json_path(EVENT, "$.detail.resource-type") == "snapshot"
    assert json_path(EVENT, "$.resources[0]").endswith("snap-1")
