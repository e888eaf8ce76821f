"""devkit.docs: generated Markdown blocks are rewritten from their renderers, drift is named."""

from __future__ import annotations

import json

import pytest

from devkit import docs

BLOCK = (
    "before\n<!-- BEGIN GENERATED: contract-limits (python -m devkit.docs) -->\n{body}"
    "<!-- END GENERATED: contract-limits -->\nafter\n"
)


def test_a_stale_block_is_rewritten_and_named() -> None:
    text, changed = docs.regenerate(BLOCK.format(body="old\n"), {})
    assert changed == ["contract-limits"]
    assert text.startswith("before\n") and text.endswith("after\n")
    assert "| `gp3MaxIops` | 80,000 IOPS |" in text
    again, changed_again = docs.regenerate(text, {})
    assert (again, changed_again) == (text, [])


def test_an_unknown_block_is_an_error() -> None:
    text = BLOCK.replace("contract-limits", "no-such-table").format(body="")
    with pytest.raises(KeyError, match="no-such-table"):
        docs.regenerate(text, {})


def test_limit_placeholders_become_values() -> None:
    text = "{gp3MinIops} to {gp3MaxIops}, {gp3MiBPerIops}"
    assert docs.with_limits(text) == "3,000 to 80,000, 0.25"


def test_payloads_read_as_the_state_machine_renders_them() -> None:
    payload = {"executionName": "$$.Execution.Name", "outcome": "retry", "keep": {"ids": []}}
    assert docs.payload_text(payload) == (
        '{"executionName": $$.Execution.Name, "outcome": "retry", "keep": {"ids": []}}'
    )
    assert docs.payload_cell("$") == "the whole state"


def test_every_contract_table_renders_every_entry() -> None:
    tasks = json.loads((docs.CONTRACT / "tasks.json").read_text())["tasks"]
    table = docs.tasks_table()
    assert all(f"`{t['module']}`" in table for t in tasks)
    environment = docs.environment_table()
    assert "{" not in environment.replace("{}", "")  # every placeholder replaced
    assert "`TransientAwsError`" in docs.errors_table()
    assert "`jobs`" in docs.execution_input_table()


def test_result_shapes_come_from_the_schemas_with_every_key() -> None:
    """docs/contract.md's result shapes had drifted from the schemas (issue #24): generated now,
    each shows every key of its schema, optional ones marked."""
    rows = {row.split(" | ")[0].strip("| `"): row for row in docs.results_table().splitlines()}
    for module, key in [
        ("start_compaction", '"directSnapshots":['),
        ("check_compaction", '"progress":null\\|{'),
        ("teardown", '"leftToTimeOut":[str]'),
        ("register_image", '"sharing"?:null\\|{'),
        ("check_instance", '"transientError"?:str'),
    ]:
        assert key in rows[module], (module, key)
    plan = docs.plan_table()
    for key in ("target", "dryRun", "copySharing"):
        assert f"| `{key}` |" in plan
