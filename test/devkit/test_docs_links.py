"""devkit.links (every relative link in the docs resolves) and devkit.workflow_table (the table of
Task states in docs/workflow.md), on small repositories built in tmp_path and on the real one."""

import json
from pathlib import Path

import pytest

from devkit import links, workflow_table
from devkit.links import anchors, problems, slug

ROOT = Path(__file__).resolve().parents[2]


def test_slug_is_githubs_anchor() -> None:
    assert slug("Settings (CDK context)") == "settings-cdk-context"
    assert slug("Start a compaction: three ways") == "start-a-compaction-three-ways"
    assert slug("`sparsecopy job`: [the](x.md) one") == "sparsecopy-job-the-one"


def test_anchors_number_repeated_headings_and_skip_code_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("# Top\n## Part\n## Part\n```\n# not a heading\n```\n## `job`: the run\n")
    assert anchors(doc) == {"top", "part", "part-1", "job-the-run"}


def test_problems_name_each_broken_link_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "lib.ts").write_text("one\ntwo\n")
    (tmp_path / "docs" / "b.md").write_text("# B side\n")
    doc = tmp_path / "docs" / "a.md"
    doc.write_text(
        "# A\n"
        "[ok](b.md#b-side) [ok](../lib.ts#L2) [ok](#a) [web](https://example.com/x)\n"
        "`[code](nope.md)`\n"
        "[gone](c.md) [bad anchor](b.md#nope) [past the end](../lib.ts#L3) ![pic](pic.svg)\n"
        "```\n[in a block](nope.md)\n```\n"
    )
    found = list(problems(doc, tmp_path))
    assert found == [
        "docs/a.md:4: c.md: no such file",
        "docs/a.md:4: b.md#nope: no heading #nope in b.md",
        "docs/a.md:4: ../lib.ts#L3: lib.ts has 2 lines, not 3",
        "docs/a.md:4: pic.svg: no such file",
    ]


def test_every_link_in_the_repositorys_docs_resolves(capsys: pytest.CaptureFixture[str]) -> None:
    assert links.main([]) == 0, capsys.readouterr().out


def _repo(tmp_path: Path) -> Path:
    """A repository with one task in contract/tasks.json, its builder, handler, domain module and
    tests."""
    for folder in ("contract", "lib", "lambdas/compactor/handlers", "test/lambdas", "test/cdk"):
        (tmp_path / folder).mkdir(parents=True)
    task = {"module": "launch", "states": [{"state": "Launch it", "stateMachine": "main"}]}
    (tmp_path / "contract" / "tasks.json").write_text(json.dumps({"tasks": [task]}))
    (tmp_path / "lib" / "workflow.ts").write_text(
        "const x = 1;\nconst launch = b.task(\n  'Launch it',\n  fn.launch,\n);\n"
        "const ok = new sfn.Pass(this, 'All good');\n"
        "export const NAMES = {\n  done: 'All done',\n};\n"
        "const end = new sfn.Succeed(this, NAMES.done);\n"
        "const run = new tasks.StepFunctionsStartExecution(this, 'Run child', {});\n"
    )
    handlers = tmp_path / "lambdas" / "compactor"
    (handlers / "launch.py").write_text("")
    (handlers / "config.py").write_text("")
    (handlers / "handlers" / "launch.py").write_text(
        "from compactor.config import Config\nfrom compactor import launch\n"
    )
    (tmp_path / "test" / "lambdas" / "test_launch.py").write_text("from compactor import launch\n")
    (tmp_path / "test" / "lambdas" / "test_other.py").write_text("import json\n")
    flow = "expect(states['Launch it']).toBeDefined();\n"
    (tmp_path / "test" / "cdk" / "flow.test.ts").write_text(flow)
    return tmp_path


def test_workflow_table_leads_from_state_to_builder_handler_domain_tests(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    table = workflow_table.task_table(root)
    row = table.splitlines()[2]
    assert row.startswith("| **Launch it** | main | [lib/workflow.ts:3](../lib/workflow.ts#L3) |")
    assert "[handlers/launch.py](../lambdas/compactor/handlers/launch.py)" in row
    assert "| [launch.py](../lambdas/compactor/launch.py) |" in row  # config.py is plumbing
    assert "[cdk/flow.test.ts](../test/cdk/flow.test.ts)" in row
    assert "[lambdas/test_launch.py](../test/lambdas/test_launch.py)" in row
    assert "test_other" not in row
    others = workflow_table.other_table(root)
    assert "| All good | Pass | [lib/workflow.ts:6](../lib/workflow.ts#L6) |" in others
    assert "| All done | Succeed | [lib/workflow.ts:10](../lib/workflow.ts#L10) |" in others
    child = "Task (a child execution, startExecution.sync:2)"
    assert f"| Run child | {child} | [lib/workflow.ts:11](../lib/workflow.ts#L11) |" in others


def test_builder_line_falls_back_to_the_contract_when_lib_does_not_name_the_state(
    tmp_path: Path,
) -> None:
    root = _repo(tmp_path)
    (root / "lib" / "workflow.ts").write_text("for (const t of tasks) build(t);\n")
    assert workflow_table.builder_line("Launch it", root) == (Path("contract/tasks.json"), 1)


def test_the_real_workflow_table_finds_every_task_state() -> None:
    table = workflow_table.task_table(ROOT)
    assert "not found in lib/" not in table
    states = json.loads((ROOT / "contract" / "tasks.json").read_text())["tasks"]
    for task in states:
        for state in task.get("states", []):
            assert f"| **{state['state']}** |" in table
