"""The package matches docs/contract.md: every handler in its table imports, every error name in
it is a class here. A renamed module or error breaks these tests, not the deployed workflow."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from compactor import errors
from compactor.config import Config
from compactor.trigger import TriggerConfig
from test_config import VALID

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
LAMBDAS_DOC = Path(__file__).resolve().parents[2] / "docs" / "lambdas.md"
HANDLERS_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "compactor" / "handlers"


def contract_modules() -> list[str]:
    rows = re.findall(r"^\|\s*\d+\s*\|\s*`([a-z_]+)`\s*\|", CONTRACT.read_text(), re.MULTILINE)
    assert len(rows) >= 11, f"expected the 11 task rows in {CONTRACT}, found {rows}"
    return rows


def contract_error_names() -> list[str]:
    text = CONTRACT.read_text()
    block = re.search(r"class names are the Step Functions error names:\s*`([^`]+)`", text)
    assert block, "the contract's list of error names was not found"
    return [name.strip() for name in block.group(1).split(",")]


@pytest.mark.parametrize("module", contract_modules())
def test_every_handler_in_the_contract_imports(module: str) -> None:
    imported = importlib.import_module(f"compactor.handlers.{module}")
    assert callable(imported.handler)
    assert list(inspect.signature(imported.handler).parameters) == ["event", "context"]


def test_no_handler_module_outside_the_contract() -> None:
    present = {p.stem for p in HANDLERS_DIR.glob("*.py") if p.stem != "__init__"}
    assert present == set(contract_modules())


@pytest.mark.parametrize("name", contract_error_names())
def test_every_error_name_in_the_contract_is_a_class(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.CompactorError)
    assert cls.__name__ == name


def test_no_expected_error_outside_the_contract() -> None:
    defined = {
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.CompactorError)
    } - {"CompactorError"}
    assert defined == set(contract_error_names())


def compactor_error_classes() -> set[str]:
    return {
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.CompactorError)
    } - {"CompactorError"}


def doc_table(heading: str) -> list[list[str]]:
    """The cells of the first Markdown table under `## heading` in docs/lambdas.md (no header
    row, no separator row)."""
    section = LAMBDAS_DOC.read_text().split(f"\n## {heading}\n", 1)
    assert len(section) == 2, f"section {heading!r} not found in {LAMBDAS_DOC}"
    lines = section[1].split("\n## ", 1)[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows: list[list[str]] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    assert len(rows) > 2, f"no table under {heading!r}"
    return rows[2:]


def names_in(cell: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z0-9_]+)`", cell))


def test_lambdas_doc_errors_table_names_every_compactor_error() -> None:
    documented = [
        name
        for row in doc_table("Errors the state machine can branch on")
        for name in names_in(row[0])
    ]
    assert len(documented) == len(set(documented)), f"an error is listed twice: {documented}"
    assert set(documented) == compactor_error_classes()


class _Recording(Mapping[str, str]):
    """An environment that remembers every variable the code looked up."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def environment_read() -> dict[str, set[str]]:
    """The variables Config.from_env (every task) and TriggerConfig.from_env (start_from_tag)
    read, found by running them on a valid environment."""
    tasks = _Recording(VALID)
    Config.from_env(tasks)
    trigger = _Recording(
        {
            "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:compactor",
            "TRIGGER_TAG_KEY": "compact",
        }
    )
    TriggerConfig.from_env(trigger)
    return {"tasks": tasks.read, "start_from_tag": trigger.read}


def test_lambdas_doc_environment_table_lists_what_the_code_reads() -> None:
    read = environment_read()
    assert len(read["tasks"]) > 10 and read["start_from_tag"]  # the recording works
    documented: dict[str, set[str]] = {"tasks": set(), "start_from_tag": set()}
    for row in doc_table("Environment"):
        readers = {reader.strip() for reader in row[1].split(",")}
        assert readers <= set(documented), f"unknown reader in {row}"
        for reader in readers:
            documented[reader] |= names_in(row[0])
    assert documented == read
