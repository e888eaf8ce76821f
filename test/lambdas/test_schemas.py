"""contract/schemas/ against itself, the contract and the code: each schema is valid draft 7 and
documents every key; there is one result schema per task; the TypedDicts of compactor/models.py
have their schema's keys, required keys and JSON types (so the two cannot drift apart); the
execution input's numbers are limits.json's. That every handler result in these tests satisfies
its schema is checked for every call (conftest.py, _results_follow_the_contract)."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import jsonschema
import pytest
from compactor import contract, models, schemas
from support import assert_valid

SCHEMAS_DIR = contract.directory() / "schemas"
SCHEMA_FILES = sorted(str(p.relative_to(SCHEMAS_DIR)) for p in SCHEMAS_DIR.rglob("*.json"))

# each TypedDict of compactor/models.py and the schema (file, JSON pointer) it types
TYPED: dict[str, tuple[str, str]] = {
    "Plan": (schemas.PLAN, ""),
    "SourceRef": (schemas.PLAN, "/definitions/sourceRef"),
    "VolumePlan": (schemas.PLAN, "/definitions/volume"),
    "CompactionPoll": (schemas.PLAN, "/definitions/compactionPoll"),
    "ImageSpec": (schemas.PLAN, "/definitions/image"),
    "DeviceMapping": (schemas.PLAN, "/definitions/deviceMapping"),
    "EbsMapping": (schemas.PLAN, "/definitions/ebsMapping"),
    "SourceBlocksResult": ("results/list_source_blocks.schema.json", ""),
    "BlockListVolume": ("results/list_source_blocks.schema.json", "/definitions/volume"),
    "InstanceResult": ("results/launch.schema.json", ""),
    "FailedPool": ("results/launch.schema.json", "/definitions/failedPool"),
    "ReadyResult": ("results/check_instance.schema.json", ""),
    "AttachResult": ("results/attach_volumes.schema.json", ""),
    "AttachedVolume": ("results/attach_volumes.schema.json", "/definitions/pair"),
    "CommandResult": ("results/start_compaction.schema.json", ""),
    "CompactionResult": ("results/check_compaction.schema.json", ""),
    "CompactionProgress": ("results/check_compaction.schema.json", "/definitions/progress"),
    "SnapshotItem": ("results/create_snapshots.schema.json", "/definitions/snapshot"),
    "SnapshotsResult": ("results/check_snapshots.schema.json", ""),
    "ImageResult": ("results/register_image.schema.json", ""),
    "SharingResult": ("results/register_image.schema.json", "/definitions/sharing"),
    "LaunchPermission": ("results/register_image.schema.json", "/definitions/launchPermission"),
    "SnapshotSharing": ("results/register_image.schema.json", "/definitions/snapshotSharing"),
    "FastSnapshotRestoreResult": ("results/enable_fast_snapshot_restore.schema.json", ""),
    "FastSnapshotRestoreState": (
        "results/enable_fast_snapshot_restore.schema.json",
        "/definitions/state",
    ),
    "TeardownResult": ("results/teardown.schema.json", ""),
    "Report": (schemas.REPORT, ""),
    "VolumeReport": (schemas.REPORT, "/definitions/volume"),
    "ErrorInfo": (schemas.REPORT, "/definitions/error"),
    "VolumeEstimate": (schemas.REPORT, "/definitions/volumeEstimate"),
    "Estimate": (schemas.REPORT, "/definitions/estimate"),
    "StartFromTagResult": ("results/start_from_tag.schema.json", ""),
    "StartFromImageBuilderResult": ("results/start_from_image_builder.schema.json", ""),
    "ImageBuilderStart": ("results/start_from_image_builder.schema.json", "/definitions/start"),
}
# keys a TypedDict leaves optional although its schema requires them: SnapshotsResult types both
# create_snapshots' result (no `completed` yet) and check_snapshots'
LOOSER = {"SnapshotsResult": {"completed"}}
# Literal aliases and the enum of the schema value they type
LITERALS: dict[str, tuple[str, str]] = {
    "Method": (schemas.EXECUTION_INPUT, "/properties/method"),
    "Target": (schemas.EXECUTION_INPUT, "/properties/target"),
    "SourceKind": (schemas.PLAN, "/definitions/sourceRef/properties/kind"),
    "Market": ("results/launch.schema.json", "/definitions/market"),
    "ReportOutcome": (schemas.REPORT, "/properties/outcome"),
}


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


def test_every_typed_dict_has_a_schema() -> None:
    typed_dicts = {name for name, value in vars(models).items() if is_typeddict(value)}
    assert typed_dicts == set(TYPED)


@pytest.mark.parametrize("name", sorted(TYPED))
def test_typed_dict_has_its_schemas_keys_and_types(name: str) -> None:
    typed = getattr(models, name)
    schema = schemas.load(*TYPED[name])
    assert set(typed.__annotations__) == set(schema["properties"])
    required = set(schema.get("required", []))
    assert set(typed.__required_keys__) == required - LOOSER.get(name, set())
    hints = get_type_hints(typed)
    for key, prop in schema["properties"].items():
        python, json_types = _json_types(hints[key]), _schema_types(prop)
        assert python is None or json_types is None or python == json_types, (
            key,
            python,
            json_types,
        )


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_literal_has_its_schemas_values(name: str) -> None:
    assert list(get_args(getattr(models, name))) == schemas.load(*LITERALS[name])["enum"]


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


def _json_types(hint: Any) -> frozenset[str] | None:
    """The JSON types a Python type hint allows (None: any)."""
    if hint is Any:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        parts = [_json_types(arg) for arg in get_args(hint)]
        return None if None in parts else frozenset().union(*parts)  # type: ignore[arg-type]
    if origin is Literal:
        return frozenset().union(*(_json_types(type(arg)) or () for arg in get_args(hint)))
    simple = {type(None): "null", str: "string", bool: "boolean", int: "integer", float: "number"}
    if hint in simple:
        return frozenset({simple[hint]})
    if origin is list:
        return frozenset({"array"})
    if origin is dict or is_typeddict(hint):
        return frozenset({"object"})
    raise TypeError(f"no JSON type for {hint!r}")


def _schema_types(schema: dict[str, Any]) -> frozenset[str] | None:
    """The JSON types a schema allows (None: any)."""
    if "oneOf" in schema:
        parts = [_schema_types(branch) for branch in schema["oneOf"]]
        return None if None in parts else frozenset().union(*parts)  # type: ignore[arg-type]
    if "enum" in schema:
        return frozenset().union(*(_json_types(type(value)) or () for value in schema["enum"]))
    if "type" not in schema:
        return None
    kinds = schema["type"]
    return frozenset([kinds] if isinstance(kinds, str) else kinds)


def test_the_summary_line_holds_at_most_a_jobs_volumes() -> None:
    volumes = schemas.load(schemas.SUMMARY)["properties"]["volumes"]
    assert (volumes["minItems"], volumes["maxItems"]) == (1, contract.limit("maxVolumesPerJob"))
