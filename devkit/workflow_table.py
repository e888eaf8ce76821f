"""The tables of docs/workflow.md, computed from the code so they cannot go stale when lines move.

Each Task state of both state machines (from contract/tasks.json, or from lib/ while that file is
missing) gets its builder line in lib/, its handler, the domain modules the handler imports and the
tests that name the handler, its domain modules or the state. The Pass, Choice, Wait, Succeed and
Fail states are listed with the line that names them. `python -m devkit.docs` puts the result into
the `workflow` block of docs/workflow.md; `python -m devkit.workflow_table` prints it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from devkit.markdown import table

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "compactor"
PACKAGE_DIR = Path("lambdas") / PACKAGE
HANDLERS = PACKAGE_DIR / "handlers"
# Imported by every handler for plumbing, not for what the task does.
PLUMBING = {"config", "models", "observability", "contract", "errors", "aws", "validation"}
# Links in docs/workflow.md are relative to docs/.
LINK_PREFIX = "../"
MACHINES = {"main": "main", "cleanup": "cleanup"}
# lib/ before tasks.json: `b.task('State', this.fn.module, ...)`.
LIB_TASK = re.compile(r"\.task\(\s*'([^']+)',\s*(?:this\.)?fn\.(\w+)")
# A state's name as lib/ writes it: a literal, or an entry of an exported constant object
# (`BATCH_STATES.estimate`, `ATTEMPT_STATES.ended`).
NAME = r"(?:'([^']+)'|([A-Z][A-Z_]*\.\w+))"
OTHER_STATE = re.compile(rf"new sfn\.(Pass|Choice|Wait|Succeed|Fail)\(\s*this[\w.]*,\s*{NAME}")
CHILD_STATE = re.compile(
    rf"(?:new (tasks)\.StepFunctionsStartExecution\(\s*this[\w.]*,|this\.(startChild)\()\s*{NAME}"
)
KINDS = {
    "markPhase": "Pass (phase)",
    "raise": "Pass (error)",
    "tasks": "Task (a child execution, startExecution.sync:2)",
    "startChild": "Task (a child execution, startExecution.sync:2)",
}
MARKED_STATE = re.compile(rf"\.(markPhase|raise)\(\s*{NAME}")
CONSTANT = re.compile(r"export const ([A-Z][A-Z_]*) = \{([^}]*)\}")
ENTRY = re.compile(r"(\w+): '([^']+)'")


@dataclass(frozen=True)
class TaskState:
    """One Task state and the Lambda it calls."""

    state: str
    machine: str
    module: str


def _link(path: Path, line: int | None = None) -> str:
    """A Markdown link from docs/ to a repository file, at a line when given; the text is the path
    (from lambdas/compactor/ or test/ for those, shorter and still unambiguous)."""
    text = path.as_posix()
    for base in (PACKAGE_DIR, Path("test")):
        if path.is_relative_to(base):
            text = path.relative_to(base).as_posix()
    text = f"{text}:{line}" if line else text
    anchor = f"#L{line}" if line else ""
    return f"[{text}]({LINK_PREFIX}{path.as_posix()}{anchor})"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _lib_files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in (root / "lib").rglob("*.ts"))


def task_states(root: Path = ROOT) -> list[TaskState]:
    """Every Task state, in the contract's order (workflow order, then the cleanup machine's)."""
    contract = root / "contract" / "tasks.json"
    if contract.exists():
        tasks = json.loads(contract.read_text())["tasks"]
        found = [
            TaskState(s["state"], s.get("stateMachine", "main"), t["module"])
            for t in tasks
            for s in t.get("states", [])
        ]
        return sorted(found, key=lambda s: s.machine != "main")
    states: list[TaskState] = []
    for path in _lib_files(root):
        machine = "cleanup" if "cleanup" in path.name else "main"
        text = (root / path).read_text()
        states += [TaskState(m[1], machine, m[2]) for m in LIB_TASK.finditer(text)]
    return states


def builder_line(state: str, root: Path = ROOT) -> tuple[Path, int] | None:
    """Where lib/ names the state: the task(...) call first, else any quoted mention in a workflow
    file, else the state's entry in contract/tasks.json (a workflow built from the table names it
    only there)."""
    quoted = re.escape(f"'{state}'")
    patterns = [rf"\.task\(\s*{quoted}", rf"name:\s*{quoted}", quoted]
    for pattern in patterns:
        for path in _lib_files(root):
            if pattern == quoted and "workflow" not in path.name:
                continue
            text = (root / path).read_text()
            match = re.search(pattern, text)
            if match:
                return path, _line_of(text, match.end() - len(state) - 1)
    contract = Path("contract") / "tasks.json"
    if (root / contract).exists():
        text = (root / contract).read_text()
        match = re.search(re.escape(f'"state": "{state}"'), text)
        if match:
            return contract, _line_of(text, match.start())
    return None


def _module_path(dotted: str, root: Path) -> Path | None:
    """The file of a module `compactor.x.y` (a module file or a package's __init__.py)."""
    base = Path("lambdas", *dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).exists():
            return candidate
    return None


def domain_modules(module: str, root: Path = ROOT) -> list[Path]:
    """The compactor modules the handler imports, without the plumbing every handler imports."""
    tree = ast.parse((root / HANDLERS / f"{module}.py").read_text())
    found: list[Path] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] != PACKAGE:
            continue
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            path = _module_path(dotted, root) or _module_path(node.module, root)
            name = Path(dotted).suffix.lstrip(".") if _module_path(dotted, root) else node.module
            if path and name.split(".")[-1] not in PLUMBING and path not in found:
                found.append(path)
    return found


def _test_files(root: Path) -> list[Path]:
    """Test modules only (test_*.py, *.test.ts), not their fixtures and helpers."""
    files = [*(root / "test").rglob("test_*.py"), *(root / "test").rglob("*.test.ts")]
    return sorted(p.relative_to(root) for p in files if "node_modules" not in p.parts)


def _imports(text: str, dotted: str) -> bool:
    """Whether a test imports module `a.b.c` (`from a.b import c`, `from a.b.c import`,
    `import a.b.c`)."""
    parent, _, name = dotted.rpartition(".")
    from_parent = rf"from {re.escape(parent)} import \(?[^)]*?\b{re.escape(name)}\b"
    direct = rf"(from|import) {re.escape(dotted)}\b"
    return bool(re.search(from_parent, text) or re.search(direct, text))


def _names_state(text: str, state: str) -> bool:
    """Whether a test names the state as a string ('State', "State") or in a fault (KIND@State)."""
    return bool(re.search(rf"['\"`@]{re.escape(state)}(?=['\"`+,)]|$)", text, re.MULTILINE))


def tests_of(task: TaskState, root: Path = ROOT) -> list[Path]:
    """Tests that import the handler or one of its domain modules, or name the state."""
    dotted = [f"{PACKAGE}.handlers.{task.module}"] + [
        ".".join(p.with_suffix("").parts[1:]).removesuffix(".__init__")
        for p in domain_modules(task.module, root)
    ]
    found = []
    for path in _test_files(root):
        text = (root / path).read_text()
        by_import = path.suffix == ".py" and any(_imports(text, d) for d in dotted)
        if by_import or _names_state(text, task.state):
            found.append(path)
    return found


def _task_row(task: TaskState, root: Path) -> list[str]:
    where = builder_line(task.state, root)
    handler = HANDLERS / f"{task.module}.py"
    cells = [
        f"**{task.state}**",
        MACHINES.get(task.machine, task.machine),
        _link(*where) if where else "not found in lib/",
        _link(handler),
        ", ".join(_link(p) for p in domain_modules(task.module, root)) or "none",
        ", ".join(_link(p) for p in tests_of(task, root)) or "none",
    ]
    return cells


def task_table(root: Path = ROOT) -> str:
    """One row per Task state: state, machine, builder line, handler, domain modules, tests."""
    header = ["Task state", "machine", "builder (lib/)", "handler", "domain module", "tests"]
    return table(header, [_task_row(t, root) for t in task_states(root)])


def other_states(root: Path = ROOT) -> list[tuple[str, str, Path, int]]:
    """(kind, state, file, line) of every Pass/Choice/Wait/Succeed/Fail state lib/ names itself
    (by a literal or an exported constant's entry), the phase markers and error raisers built by
    workflow-building-blocks.ts, and the Tasks that run a child execution instead of a Lambda."""
    texts = {path: (root / path).read_text() for path in _lib_files(root)}
    names = {
        f"{constant[1]}.{entry[1]}": entry[2]
        for text in texts.values()
        for constant in CONSTANT.finditer(text)
        for entry in ENTRY.finditer(constant[2])
    }
    found = []
    for path, text in texts.items():
        for pattern in (OTHER_STATE, MARKED_STATE, CHILD_STATE):
            for match in pattern.finditer(text):
                *kinds, literal, constant = match.groups()
                name = literal or names.get(constant)
                if name is not None:
                    kind = next(k for k in kinds if k)
                    at = _line_of(text, match.start(len(kinds) + (1 if literal else 2)))
                    found.append((KINDS.get(kind, kind), name, path, at))
    return sorted(found, key=lambda f: (f[2], f[3]))


def other_table(root: Path = ROOT) -> str:
    """The states that call no Lambda, grouped by the file that builds them."""
    rows = [[state, kind, _link(path, line)] for kind, state, path, line in other_states(root)]
    return table(["state", "type", "built at"], rows)


def workflow_table(root: Path = ROOT) -> str:
    """The generated block of docs/workflow.md."""
    return "\n\n".join(
        [
            "### Task states (each calls a Lambda)",
            task_table(root),
            "### States that call no Lambda",
            "Each poll loop `<loop>` also has `<loop>: first call`, `: wait`, `: count call`, "
            "`: check`, `: done` and `: gave up`, built by `pollLoop` in "
            + _pollloop_link(root)
            + ".",
            other_table(root),
        ]
    )


def _pollloop_link(root: Path) -> str:
    path = Path("lib") / "workflow-building-blocks.ts"
    text = (root / path).read_text() if (root / path).exists() else ""
    match = re.search(r"^\s*pollLoop\(", text, re.MULTILINE)
    return _link(path, _line_of(text, match.end())) if match else f"`{path}`"


if __name__ == "__main__":
    print(workflow_table())
