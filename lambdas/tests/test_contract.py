"""The package matches docs/contract.md: every handler in its table imports, every error name in
it is a class here. A renamed module or error breaks these tests, not the deployed workflow."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from compactor import errors

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
HANDLERS_DIR = Path(__file__).resolve().parents[1] / "compactor" / "handlers"


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
