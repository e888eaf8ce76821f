"""The package matches contract/*.json: the handlers folder holds exactly the task modules, every
error name is a class of compactor/errors.py, Config and TriggerConfig read exactly the environment
keys of the contract, the constants that restate a limit come from limits.json, and the package
finds contract/ where the Lambda asset puts it. A renamed module, error or key breaks these tests,
not the deployed workflow."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from compactor import config, contract, errors, sizing, source_blocks
from compactor.config import Config
from compactor.report import build
from compactor.trigger import TriggerConfig
from test_config import VALID

REPO = Path(__file__).resolve().parents[2]
HANDLERS_DIR = REPO / "lambdas" / "compactor" / "handlers"
PACKAGE = HANDLERS_DIR.parent
CONTRACT_DIR = REPO / "contract"


def test_the_package_reads_the_repository_contract() -> None:
    assert contract.directory() == CONTRACT_DIR


@pytest.mark.parametrize("module", contract.task_modules())
def test_every_task_of_the_contract_has_a_handler(module: str) -> None:
    imported = importlib.import_module(f"compactor.handlers.{module}")
    assert callable(imported.handler)
    assert list(inspect.signature(imported.handler).parameters) == ["event", "context"]


def test_no_handler_module_outside_the_contract() -> None:
    present = {p.stem for p in HANDLERS_DIR.glob("*.py") if p.stem != "__init__"}
    assert present == set(contract.task_modules())


def test_state_names_are_unique_and_payload_paths_are_jsonpaths() -> None:
    states = [s for task in contract.tasks() for s in task["states"]]
    names = [(s["stateMachine"], s["state"]) for s in states]
    assert len(names) == len(set(names))
    for state in states:
        assert state["resultPath"].startswith("$.")
        payload = state["payload"]
        paths = re.findall(r'"(\$[^"]*)"', json.dumps(payload))
        assert all(re.fullmatch(r"\$\$?(\.[A-Za-z]+(\[\*\])?)*", path) for path in paths), paths
    # only the non-workflow functions (rule and schedule targets) are called by no state
    unstated = [t["module"] for t in contract.tasks() if not t["states"]]
    assert unstated == [t["module"] for t in contract.tasks() if not t["workflow"]]
    assert {"start_from_tag", "sweep"} <= set(unstated)


def compactor_error_classes() -> set[str]:
    return {
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.CompactorError)
    } - {"CompactorError"}


def test_errors_py_defines_exactly_the_contracts_expected_errors() -> None:
    assert compactor_error_classes() == set(contract.error_names("CompactorError"))


def test_every_other_error_class_of_the_contract_is_what_it_says() -> None:
    assert issubclass(errors.ConfigError, Exception)
    assert not issubclass(errors.ConfigError, errors.CompactorError)
    names = [e["name"] for e in contract.errors()]
    assert len(names) == len(set(names))
    assert "ConfigError" in contract.error_names("ConfigError")


def test_limit_placeholders_name_known_limits() -> None:
    texts = [v["checked"] for v in contract.variables()] + [e["meaning"] for e in contract.errors()]
    used = {name for text in texts for name in re.findall(r"\{([A-Za-z][A-Za-z0-9]*)\}", text)}
    assert used and used <= set(contract.limits())


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


def test_config_reads_exactly_the_contracts_keys() -> None:
    recording = _Recording(VALID)
    Config.from_env(recording)
    assert recording.read == set(contract.variable_names("Config"))
    assert set(config.ENVIRONMENT_KEYS) == recording.read


def test_trigger_config_reads_exactly_the_contracts_keys() -> None:
    recording = _Recording(
        {
            "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:compactor",
            "TRIGGER_TAG_KEY": "compact",
        }
    )
    TriggerConfig.from_env(recording)
    assert recording.read == set(contract.variable_names("TriggerConfig"))


def test_each_workflow_task_reads_exactly_its_own_keys() -> None:
    """Config.from_env(task=...) reads the keys contract/environment.json gives that function,
    and no other."""
    for task in contract.task_modules(workflow_only=True):
        recording = _Recording(VALID)
        Config.from_env(recording, task=task)
        assert (task, recording.read) == (task, set(contract.task_variable_names(task, "Config")))


def test_a_key_the_task_was_not_given_is_refused_by_name() -> None:
    given = Config.from_env(VALID, task="check_compaction")
    assert given.command_log_group == VALID["COMMAND_LOG_GROUP"]
    with pytest.raises(errors.ConfigError) as refused:
        _ = given.stack_name
    assert str(refused.value) == (
        "check_compaction reads STACK_NAME, which contract/environment.json does not give it: "
        "add check_compaction to the functions of STACK_NAME there (the stack then sets it on "
        "check_compaction)"
    )
    assert "stack_name" not in repr(given) and "command_log_group" in repr(given)
    # a task's missing key still fails at once, and another task's missing key does not matter
    without = {k: v for k, v in VALID.items() if k != "COMMAND_LOG_GROUP"}
    with pytest.raises(errors.ConfigError, match="COMMAND_LOG_GROUP is missing"):
        Config.from_env(without, task="check_compaction")
    assert Config.from_env(without, task="teardown").stack_name == VALID["STACK_NAME"]


def test_each_handler_reads_the_settings_of_its_own_task() -> None:
    for task in contract.task_modules(workflow_only=True):
        source = (HANDLERS_DIR / f"{task}.py").read_text()
        calls = re.findall(r"Config\.from_env\(([^)]*)\)", source)
        assert calls in ([], [f'task="{task}"']), (task, calls)
        # a task given keys reads them through its settings
        assert bool(calls) == bool(contract.task_variable_names(task, "Config")), task
    # and only the handler makes them: a module that read Config.from_env() itself would read every
    # key, including those its function is not given (summarize_batch's results.py once did)
    elsewhere = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.parent != HANDLERS_DIR and path.name != "config.py"
        and "Config.from_env(" in path.read_text()
    ]  # fmt: skip
    assert elsewhere == []


def _imported_modules(module: str) -> set[str]:
    """The compactor modules `module` imports, transitively."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = PACKAGE.parent / (name.replace(".", "/") + ".py")
        if name in seen or not path.exists():
            path = PACKAGE.parent / name.replace(".", "/") / "__init__.py"
            if name in seen or not path.exists():
                continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compactor"):
                todo += [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
    return seen


def test_no_task_is_given_a_key_its_code_never_reads() -> None:
    """Each key a task is given names a Config field that the handler's own modules read (an
    over-approximation: a module imported for one function counts whole)."""
    field_of = {key: field for key, (field, _) in config._READERS.items()}
    for task in contract.task_modules(workflow_only=True):
        code = "\n".join(
            (PACKAGE.parent / (m.replace(".", "/") + ".py")).read_text()
            for m in _imported_modules(f"compactor.handlers.{task}")
            if (PACKAGE.parent / (m.replace(".", "/") + ".py")).exists()
        )
        unread = [
            key
            for key in contract.task_variable_names(task, "Config")
            if not re.search(rf"\.{field_of[key]}\b", code)
        ]
        assert (task, unread) == (task, [])


def test_every_key_goes_to_a_function_that_reads_it() -> None:
    readers = {
        **{task: {"Config", "Powertools"} for task in contract.task_modules(workflow_only=True)},
        "workflow": {"Powertools"},
        "start_from_tag": {"TriggerConfig", "Powertools"},
        "start_from_image_builder": {"ImageBuilderConfig", "Powertools"},
        "sweep": {"SweepConfig", "Powertools"},
    }
    for variable in contract.variables():
        read_by = {r.strip() for r in variable["readBy"].split(",")}
        for function in variable["functions"]:
            assert read_by & readers[function], variable


def test_the_python_constants_come_from_the_limits() -> None:
    value = contract.limit_value
    assert (value("gp3MinIops"), value("gp3MaxIops")) == (config.GP3_MIN_IOPS, config.GP3_MAX_IOPS)
    assert value("gp3MiBPerIops") == config.GP3_MIB_PER_IOPS
    assert value("compactionPollMaxAttempts") == sizing.MAX_POLL_ATTEMPTS
    assert value("documentTimeoutSeconds") == sizing.DOCUMENT_TIMEOUT_SECONDS
    assert value("blockListSliceSeconds") == source_blocks.SLICE_SECONDS
    assert value("blockListPagesPerSecond") == source_blocks.PAGES_PER_SECOND
    assert value("blockListPageSize") == source_blocks.PAGE_SIZE


def test_the_reports_phases_are_the_contracts() -> None:
    assert tuple(build.PHASES) == contract.phases()


def test_the_asset_layout_finds_contract_beside_the_package(tmp_path: Path) -> None:
    """lib/task-functions.ts ships contract/ beside compactor/ in the Lambda asset."""
    package = tmp_path / "asset" / "compactor"
    package.mkdir(parents=True)
    shutil.copy(REPO / "lambdas" / "compactor" / "contract.py", package / "contract.py")
    (package / "__init__.py").write_text("")
    shutil.copytree(CONTRACT_DIR, tmp_path / "asset" / "contract")
    found = subprocess.run(
        [sys.executable, "-c", "from compactor import contract; print(contract.directory())"],
        cwd=tmp_path / "asset",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found == str(tmp_path / "asset" / "contract")


def test_without_a_contract_the_error_says_what_is_missing(tmp_path: Path) -> None:
    package = tmp_path / "deep" / "er" / "compactor"
    package.mkdir(parents=True)
    shutil.copy(REPO / "lambdas" / "compactor" / "contract.py", package / "contract.py")
    (package / "__init__.py").write_text("")
    run = subprocess.run(
        [sys.executable, "-c", "from compactor import contract; contract.directory()"],
        cwd=package.parent,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "the Lambda asset must ship it" in run.stderr


def test_the_input_schema_states_the_jobs_limits() -> None:
    jobs = contract.load("schemas/execution-input.schema")["properties"]["jobs"]
    assert (jobs["minimum"], jobs["maximum"], jobs["default"]) == (
        contract.limit("jobsMin"),
        contract.limit("jobsMax"),
        contract.limit("jobsDefault"),
    )
