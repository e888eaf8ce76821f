"""contract/schemas/ against itself, the contract and the code: each schema is valid draft 7 and
documents every key; there is one result schema per task; the execution input's numbers are
limits.json's. The TypedDicts of compactor/models.py are generated from the schemas
(devkit/generate.py; test/devkit/test_generate.py and `make lint` fail when they are stale).
That every handler result in these tests satisfies its schema is checked for every call
(conftest.py, _results_follow_the_contract)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from compactor import contract, schemas, validation
from compactor.batch import batch_input
from support import assert_valid

SCHEMAS_DIR = contract.directory() / "schemas"
SCHEMA_FILES = sorted(str(p.relative_to(SCHEMAS_DIR)) for p in SCHEMAS_DIR.rglob("*.json"))


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_each_schema_is_valid_draft_7(name: str) -> None:
    raw = json.loads((SCHEMAS_DIR / name).read_text())
    assert raw["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(raw)
    jsonschema.Draft7Validator.check_schema(schemas.load(name))
    assert "$ref" not in json.dumps(schemas.load(name))


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_every_key_is_described(name: str) -> None:
    """The doc tables are generated from these descriptions."""
    undescribed = [
        where for where, prop in _properties(schemas.load(name), "") if not prop.get("description")
    ]
    assert not undescribed, f"{name}: no description for {undescribed}"


def test_one_result_schema_per_task() -> None:
    results = {
        Path(n).name.removesuffix(".schema.json") for n in SCHEMA_FILES if n.startswith("results/")
    }
    assert results == set(contract.task_modules())


def test_the_input_schemas_numbers_are_the_limits() -> None:
    jobs = schemas.load(schemas.EXECUTION_INPUT)["properties"]["jobs"]
    assert (jobs["minimum"], jobs["maximum"], jobs["default"]) == (
        contract.limit("jobsMin"),
        contract.limit("jobsMax"),
        contract.limit("jobsDefault"),
    )


@pytest.mark.parametrize(
    "execution_input",
    [
        {"snapshotId": "snap-0123456789abcdef0"},
        {"snapshotId": "snap-0123456789abcdef0", "method": "trim", "tags": {"team": "storage"}},
        {
            "imageId": "ami-0123456789abcdef0",
            "imageName": "web-2026-11-compact",
            "fastSnapshotRestoreAzs": ["us-east-1a", "us-east-1b"],
        },
        {"snapshotId": "arn:aws:ec2:us-east-1::snapshot/snap-0123456789abcdef0"},
        {"snapshotId": None, "imageId": "ami-0123456789abcdef0", "kmsKeyId": "alias/backup"},
    ],
)
def test_documented_inputs_are_valid(execution_input: dict[str, Any]) -> None:
    assert_valid(execution_input, schemas.EXECUTION_INPUT)


def _properties(schema: Any, where: str) -> typing.Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every named property, at any depth."""
    if isinstance(schema, list):
        for item in schema:
            yield from _properties(item, where)
        return
    if not isinstance(schema, dict):
        return
    for key, prop in schema.get("properties", {}).items():
        yield f"{where}.{key}", prop
    for key, value in schema.items():
        if key in ("properties",):
            for name, prop in value.items():
                yield from _properties(prop, f"{where}.{name}")
        elif key not in ("if", "then", "else"):  # conditions restate keys, described above
            yield from _properties(value, where)


def test_the_summary_line_holds_at_most_a_jobs_volumes() -> None:
    volumes = schemas.load(schemas.SUMMARY)["properties"]["volumes"]
    assert (volumes["minItems"], volumes["maxItems"]) == (1, contract.limit("maxVolumesPerJob"))


@pytest.mark.parametrize(
    ("wording", "name"),
    [
        (validation._WORDING, schemas.EXECUTION_INPUT),
        (batch_input._WORDING, batch_input.BATCH_INPUT),
    ],
    ids=["execution-input", "batch-input"],
)
def test_every_error_wording_names_a_key_and_keyword_of_its_schema(
    wording: dict[tuple[str, str], Any], name: str
) -> None:
    """The user's error messages are keyed by schema path and keyword: a key renamed or a check
    dropped in the schema must not leave a wording that can never be used."""
    schema = schemas.load(name)
    # a key's check may also come from the root's conditions (if/then/else, oneOf, ...)
    conditions = {k: v for k, v in schema.items() if k not in ("properties", "definitions")}
    for key, keyword in wording:
        node: Any = schema
        for part in key.split(".") if key else []:
            node = _property(node, part.removesuffix("[]"), f"{name}: {key!r}")
            if part.endswith("[]"):
                node = node["items"]
        keywords = set(_keywords(node)) | set(_keywords(conditions))
        assert keyword == "*" or keyword in keywords, f"{name}: {key!r} has no {keyword!r} check"
        if key:  # root failures are worded from the whole schema
            assert isinstance(node, dict) and node, (name, key)


def _property(node: dict[str, Any], name: str, where: str) -> Any:
    """The schema of property `name` of an object schema, also when a branch declares it."""
    found = [node.get("properties", {}).get(name)]
    for branch in ("oneOf", "anyOf", "allOf"):
        found += [b.get("properties", {}).get(name) for b in node.get(branch, [])]
    declared = [f for f in found if f is not None]
    assert declared, f"{where}: no property {name!r} in the schema"
    return declared[0]


def _keywords(schema: Any) -> typing.Iterator[str]:
    """Every keyword the schema uses, at any depth (property names excluded)."""
    if isinstance(schema, list):
        for item in schema:
            yield from _keywords(item)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            if key == "properties":
                for prop in value.values():
                    yield from _keywords(prop)
            else:
                yield from _keywords(value)
