"""The JSON examples in the docs satisfy the contract's schemas (contract/schemas/).

An example is a fenced ```json block right below a marker naming its schema:

    <!-- example: report -->            the block is one or more values of report.schema.json
    <!-- example: execution-input keys --> each key of the block's object is a key of the schema
                                          and its value satisfies that key's schema (an example
                                          listing every key, which no single input may combine)

Every ```json block of docs/contract.md must carry a marker, so a new example cannot skip the check.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
import pytest

from devkit import docs

# compactor (the Lambda package) imports from lambdas/ (pyproject.toml's pytest pythonpath)
schemas: Any = importlib.import_module("compactor.schemas")

MARKED = re.compile(
    r"^<!-- example: (?P<schema>[a-z0-9/-]+)(?P<keys> keys)? -->\n```json\n(?P<body>.*?)^```$",
    re.DOTALL | re.MULTILINE,
)
FENCE = re.compile(r"^```json$", re.MULTILINE)
MUST_MARK = [docs.ROOT / "docs" / "contract.md"]


def examples(text: str) -> list[tuple[str, bool, str, int]]:
    """(schema, keys only, block text, line) of each marked example in a Markdown text."""
    return [
        (m["schema"], m["keys"] is not None, m["body"], text.count("\n", 0, m.start()) + 2)
        for m in MARKED.finditer(text)
    ]


def values(body: str) -> list[Any]:
    """The JSON values of a block, one after another (an example may list several inputs)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while body[at:].strip():
        at += len(body[at:]) - len(body[at:].lstrip())
        value, at = decoder.raw_decode(body, at)
        found.append(value)
    return found


@cache
def validator(schema: str, pointer: str = "") -> Callable[[Any], Any]:
    return fastjsonschema.compile(schemas.load(f"{schema}.schema.json", pointer), use_default=False)


def problems(schema: str, keys_only: bool, body: str) -> list[str]:
    """Why the block does not satisfy the schema; empty when it does."""
    found = []
    for value in values(body):
        checks = (
            [(f"/properties/{key}", item, key) for key, item in value.items()]
            if keys_only
            else [("", value, "")]
        )
        for pointer, item, key in checks:
            if keys_only and key not in schemas.load(f"{schema}.schema.json")["properties"]:
                found.append(f"{key}: not a key of {schema}")
                continue
            try:
                validator(schema, pointer)(item)
            except fastjsonschema.JsonSchemaException as error:
                found.append(f"{key or 'example'}: {error}")
    return found


def documents() -> list[Path]:
    return [docs.ROOT / "README.md", *sorted((docs.ROOT / "docs").glob("*.md"))]


EXAMPLES = [
    (path.name, line, schema, keys, body)
    for path in documents()
    for schema, keys, body, line in examples(path.read_text(encoding="utf-8"))
]
CASES = [
    pytest.param(schema, keys, body, id=f"{name}:{line}:{schema}")
    for name, line, schema, keys, body in EXAMPLES
]


def test_the_docs_have_examples_to_check() -> None:
    names = {schema for _, _, schema, _, _ in EXAMPLES}
    assert {"report", "execution-input"} <= names


@pytest.mark.parametrize(("schema", "keys_only", "body"), CASES)
def test_each_example_satisfies_its_schema(schema: str, keys_only: bool, body: str) -> None:
    assert problems(schema, keys_only, body) == []


@pytest.mark.parametrize("path", MUST_MARK, ids=lambda p: p.name)
def test_every_json_block_of_the_contract_doc_is_marked(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(FENCE.findall(text)) == len(examples(text))


def test_a_broken_example_is_caught() -> None:
    report = next(body for _, _, schema, _, body in EXAMPLES if schema == "report")
    without_notes = json.loads(report)
    del without_notes["notes"]
    assert problems("report", False, json.dumps(without_notes))
    found = problems("execution-input", True, '{"snapshotId": "snap-1", "jbos": 4}')
    assert [line.split(":")[0] for line in found] == ["snapshotId", "jbos"]
    assert problems("execution-input", False, '{"snapshotId": "snap-0123456789abcdef0"}') == []
