"""The contract's JSON Schemas (contract/schemas/, draft 7): the execution input, the plan, each
task's result (results/<module>.schema.json) and the report; and validation against them with
Powertools' validation utility (fastjsonschema, in the public Powertools layer).

A schema may point into another file (`"$ref": "plan.schema.json#/definitions/sourceRef"`,
relative to the pointing file); `load` puts every pointed-at part in place, so the validator
and the doc tables get one self-contained schema and nothing is fetched."""

from __future__ import annotations

import json
import posixpath
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.validation import validate as powertools_validate

from compactor import contract

EXECUTION_INPUT = "execution-input.schema.json"
PLAN = "plan.schema.json"
REPORT = "report.schema.json"
# the data plane's standard output line (ssm-documents/sparsecopy/summary.py)
SUMMARY = "summary.schema.json"


def result_schema(module: str) -> str:
    """The schema of what the handler `module` returns."""
    return f"results/{module}.schema.json"


@cache
def load(name: str, pointer: str = "") -> dict[str, Any]:
    """contract/schemas/<name>, or the part of it at the JSON pointer (`/definitions/volume`),
    with every `$ref` replaced by what it points at. Shared: do not change it."""
    schema = _inline(_at(_read(name), pointer), name)
    if not isinstance(schema, dict):
        raise TypeError(f"{name}#{pointer} is not a schema object")
    return schema


def validate(data: Any, name: str) -> Any:
    """`data` if it satisfies the schema, with the schema's defaults filled in (in place);
    raises Powertools' SchemaValidationError naming the first failing value and keyword."""
    return powertools_validate(event=data, schema=load(name))


@cache
def _read(name: str) -> Any:
    with (contract.directory() / "schemas" / name).open(encoding="utf-8") as file:
        return json.load(file)


def _at(document: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        document = document[part.replace("~1", "/").replace("~0", "~")]
    return document


def _inline(node: Any, base: str) -> Any:
    """node with each `$ref` resolved against `base` (the file node comes from); keys beside a
    `$ref` (a description) are kept. Definitions are dropped once in place."""
    if isinstance(node, list):
        return [_inline(item, base) for item in node]
    if not isinstance(node, dict):
        return node
    resolved: dict[str, Any] = {}
    if "$ref" in node:
        target, _, pointer = str(node["$ref"]).partition("#")
        where = base
        if target:
            where = posixpath.normpath(posixpath.join(posixpath.dirname(base), target))
        resolved = _inline(_at(_read(where), pointer), where)
        resolved = {k: v for k, v in resolved.items() if k not in ("$schema", "title")}
    for key, value in node.items():
        if key not in ("$ref", "definitions"):
            resolved[key] = _inline(value, base)
    return resolved
