"""The generated blocks of the repository's Markdown, one home for each fact they restate.

A block in a Markdown file:

    <!-- BEGIN GENERATED: <name> (python -m devkit.docs) -->
    ...
    <!-- END GENERATED: <name> -->

`python -m devkit.docs` rewrites every block from the renderer registered under its name (contract
tables from contract/*.json, docs/deploy.md's settings from contract/settings.json, the size
table from compactor.sizing, docs/workflow.md's table from devkit.workflow_table, the twin's
report fields from twin.report); `--check` changes nothing and exits 1 naming each file and
block that differs (`make lint` runs it). A block whose name is not registered is an error too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from devkit import generate
from devkit.markdown import table

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "contract"
# compactor (the Lambda package) imports from lambdas/, as Lambda imports from its code root
BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED: (?P<name>[a-z0-9-]+) \(python -m devkit\.docs\) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)
DASH = "\N{EN DASH}"
SKIP_DIRS = {"node_modules", ".venv", ".venv-checkov", "cdk.out", "out", ".git", ".stamps"}


def contract(name: str) -> Any:
    with (CONTRACT / f"{name}.json").open(encoding="utf-8") as file:
        return json.load(file)


def number(value: float) -> str:
    """1000 -> 1,000; 0.25 -> 0.25."""
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def with_limits(text: str) -> str:
    """`{gp3MaxIops}` in contract prose -> 80,000."""
    limits = contract("limits")["limits"]
    name = re.compile(r"\{([A-Za-z][A-Za-z0-9]*)\}")
    return name.sub(lambda m: number(limits[m.group(1)]["value"]), text)


def payload_text(payload: Any) -> str:
    """A Task state's payload as the state machine renders it: JSONPaths bare, literals as JSON."""
    if payload == "$":
        return "the whole state"
    if isinstance(payload, dict):
        return "{" + ", ".join(f'"{k}": {payload_text(v)}' for k, v in payload.items()) + "}"
    if isinstance(payload, str) and payload.startswith("$"):
        return payload
    return json.dumps(payload)


def payload_cell(payload: Any) -> str:
    return "the whole state" if payload == "$" else f"`{payload_text(payload)}`"


def tasks_table() -> str:
    """docs/contract.md: each Lambda, its timeout and every Task state calling it."""
    rows = []
    for task in contract("tasks")["tasks"]:
        states = task["states"] or [None]
        for state in states:
            rows.append(
                [
                    f"`{task['module']}`",
                    f"{task['timeoutSeconds']} s",
                    f"{state['state']} ({state['stateMachine']})" if state else "—",
                    payload_cell(state["payload"]) if state else task["summary"],
                    f"`{state['resultPath']}`" if state else "—",
                ]
            )
    return table(["module", "Lambda timeout", "Task state", "payload", "result path"], rows)


def task_summaries() -> str:
    """docs/contract.md: one line per Lambda saying what it does."""
    return (
        "\n".join(f"- `{t['module']}`: {t['summary']}" for t in contract("tasks")["tasks"])
        + "\n\nPhases (keys of `$.timings` besides `start`): "
        + ", ".join(f"`{p}`" for p in contract("tasks")["phases"])
        + ". Poll loop counters (keys of `$.polls`): "
        + ", ".join(f"`{p}`" for p in contract("tasks")["pollLoops"])
        + "."
    )


def environment_table() -> str:
    rows = [
        [
            f"`{v['name']}`",
            ", ".join("every workflow task" if f == "workflow" else f for f in v["functions"]),
            v["readBy"],
            with_limits(v["description"]),
            with_limits(v["checked"]),
        ]
        for v in contract("environment")["variables"]
    ]
    return table(["variable", "set on", "read by", "meaning", "checked"], rows)


def limits_table(prefix: str | tuple[str, ...] = "") -> str:
    rows = [
        [f"`{name}`", f"{number(limit['value'])} {limit['unit']}", limit["description"]]
        for name, limit in contract("limits")["limits"].items()
        if name.startswith(prefix)
    ]
    return table(["limit", "value", "meaning"], rows)


def dataplane_table() -> str:
    """docs/contract.md: what the data-plane program shares (contract/dataplane.json), with the
    name it has in the program (devkit.generate writes sparsecopy/shared.py)."""
    own = contract("dataplane")["constants"]
    rows = [
        [
            f"`{name}`",
            f"`{generate.constant_name(name)}`",
            f"{number(entry['value'])} {entry['unit']}",
            entry["description"] if name in own else "a limit (above)",
        ]
        for name, entry in generate.dataplane_entries()
    ]
    return table(["name", "in sparsecopy/shared.py", "value", "meaning"], rows)


def errors_table() -> str:
    kinds = {"CompactorError": "expected", None: "state machine"}
    rows = [
        [
            f"`{e['name']}`",
            kinds.get(e["class"], f"other ({e['class']})"),
            e["raisedBy"],
            with_limits(e["meaning"]),
        ]
        for e in contract("errors")["errors"]
    ]
    return table(["error", "kind", "raised by", "meaning / what to do"], rows)


def schema_type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " or ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    kinds = prop.get("type", "any")
    return " or ".join(kinds) if isinstance(kinds, list) else str(kinds)


def schema_bounds(prop: dict[str, Any]) -> str:
    words = {
        "minimum": "≥ {}",
        "maximum": "≤ {}",
        "maxProperties": "at most {} keys",
        "uniqueItems": "no repeats",
        "pattern": "`{}`",
    }
    return "; ".join(
        template.format(prop[key])
        for key, template in words.items()
        # `is`, not `in`: a minimum of 0 equals False
        if prop.get(key) is not None and prop.get(key) is not False
    )


def execution_input_table() -> str:
    """docs/contract.md: the execution input's keys, from its JSON Schema."""
    return schema_table(contract("schemas/execution-input.schema"))


def batch_selector_table() -> str:
    """docs/batch.md: the batch input's selector keys, from its JSON Schema."""
    return schema_table(contract("schemas/batch-input.schema")["properties"]["selector"])


def schema_table(schema: dict[str, Any]) -> str:
    """An object schema's keys: type, default, meaning (its description) and what is checked."""
    rows = [
        [
            f"`{key}`",
            schema_type(prop),
            f"`{json.dumps(prop['default'])}`" if "default" in prop else "—",
            prop.get("description", ""),
            schema_bounds(prop),
        ]
        for key, prop in schema["properties"].items()
    ]
    return table(["key", "type", "default", "meaning", "checked"], rows)


def summary_line_table(entry: str = "volume") -> str:
    """docs/contract.md: a volume's entry of the data plane's summary line (`inspectedVolume`: of
    a dry run's), from its schema (compactor.schemas puts the shared count definition in place)."""
    schemas = importlib.import_module("compactor.schemas")
    return schema_table(schemas.load(schemas.SUMMARY, f"/definitions/{entry}"))


SHAPE_TYPES = {"string": "str", "integer": "N", "number": "num", "boolean": "bool", "null": "null"}


def shape(schema: dict[str, Any], depth: int = 0) -> str:
    """A schema as a one-line shape: `{"key":type,"optional"?:type}`, `[item]`, `a|b`; objects
    below the second level as `{…}` (their keys are in the schema)."""
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        return "|".join(shape(branch, depth) for branch in branches)
    if "enum" in schema or "const" in schema:
        return "|".join(json.dumps(v) for v in schema.get("enum", [schema.get("const")]))
    kinds = schema.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    parts = []
    for kind in kinds:
        if kind == "object" and "properties" in schema:
            if depth >= 2:
                parts.append("{…}")
                continue
            required = set(schema.get("required", []))
            keys = [
                f'"{key}"{"" if key in required else "?"}:{shape(prop, depth + 1)}'
                for key, prop in schema["properties"].items()
            ]
            parts.append("{" + ",".join(keys) + "}")
        elif kind == "object":
            parts.append("{…}")
        elif kind == "array":
            parts.append(f"[{shape(schema.get('items', {}), depth)}]")
        else:
            parts.append(SHAPE_TYPES.get(str(kind), str(kind)))
    return "|".join(parts)


def results_table() -> str:
    """docs/contract.md: what each task returns and where the state keeps it, from
    contract/schemas/results/ (the plan's and the report's keys have tables of their own)."""
    schemas = importlib.import_module("compactor.schemas")
    rows = []
    for task in contract("tasks")["tasks"]:
        module = task["module"]
        schema = schemas.load(schemas.result_schema(module))
        paths = ", ".join(sorted({f"`{s['resultPath']}`" for s in task["states"]})) or "—"
        own = {"prepare": "the plan (below)", "report": "the report (below)"}.get(module)
        rows.append([f"`{module}`", paths, own or f"`{shape(schema)}`"])
    return table(["task", "stored at", "result (`?` = optional key)"], rows)


def plan_table() -> str:
    """docs/contract.md: the plan's keys, from plan.schema.json."""
    schemas = importlib.import_module("compactor.schemas")
    return schema_table(schemas.load(schemas.PLAN))


def checkov_table() -> str:
    """docs/deploy.md: the checkov checks the templates fail on purpose
    (lib/checkov-suppressions.json; lib/checkov-suppressions.ts writes them into the Metadata)."""
    path = ROOT / "lib" / "checkov-suppressions.json"
    rows = [
        [f"`{s['check']}`", s["title"], s["where"], s["reason"]]
        for s in json.loads(path.read_text())["suppressions"]
    ]
    return table(["check", "what it wants", "where", "why not"], rows)


def duration(seconds: int) -> str:
    """21600 -> 6 hours; 600 -> 10 minutes; 90 -> 90 seconds."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def setting_bound(value: int | str) -> int:
    """A bound of contract/settings.json: a number, or a limit's name."""
    if isinstance(value, str):
        result: int = contract("limits")["limits"][value]["value"]
        return result
    return value


def setting_accepts(spec: dict[str, Any]) -> str:
    """What a setting takes, in the doc's words (bounds from limits.json)."""
    kind = spec["kind"]
    if "acceptsText" in spec:
        return with_limits(spec["acceptsText"])
    if kind == "pollLoop":
        seconds = f"{{pollSecondsMin}}{DASH}{{pollSecondsMax}} s"
        return with_limits(f"{seconds} / 1{DASH}{{pollMaxAttemptsMax}} calls")
    if kind == "integer" and "allowed" in spec:
        return ", ".join(str(v) for v in spec["allowed"]) + f" {spec.get('unit', '')}".rstrip()
    if "allowed" in spec:
        return ", ".join(f"`{v}`" for v in spec["allowed"])
    if kind == "integer":
        low, high = setting_bound(spec["min"]), setting_bound(spec["max"])
        return f"{number(low)}{DASH}{number(high)} {spec.get('unit', '')}".rstrip()
    if kind == "boolean":
        return "`true`, `false`"
    prefix = "comma list (or JSON array) of " if kind == "list" else ""
    return (prefix + str(spec["accepts"])).replace("<", "&lt;")


def setting_default(spec: dict[str, Any]) -> str:
    default = spec["default"]
    if default is None:
        return str(spec["defaultText"])
    if spec["kind"] == "pollLoop":
        return f"`{default['intervalSeconds']}` / `{default['maxAttempts']}`"
    text = f"`{json.dumps(default).strip(chr(34))}`"
    if "defaultText" in spec:
        return f"{text} ({spec['defaultText']})"
    if spec.get("unit") == "min" and default % 60 == 0:
        return f"{text} ({default // 60} h)"
    return text


def settings_table() -> str:
    """docs/deploy.md: every CDK context key lib/settings.ts reads (contract/settings.json)."""
    rows = []
    for key, spec in contract("settings")["settings"].items():
        meaning = spec["meaning"]
        if spec["kind"] == "pollLoop":
            default = spec["default"]
            wait = duration(default["intervalSeconds"] * default["maxAttempts"])
            meaning = meaning.replace("{wait}", wait)
            key = f"{key}Seconds` / `{key}MaxAttempts"
        rows.append(
            [f"`{key}`", setting_default(spec), setting_accepts(spec), with_limits(meaning)]
        )
    return table(["key", "default", "accepts", "meaning"], rows)


def sizing_table() -> str:
    """docs/deploy.md's "Limits" table: the instance types the Lambda picks by bytes to copy."""
    sizing = importlib.import_module("compactor.sizing")
    rows, low = [], 0
    for size in sizing.SIZE_CLASSES:
        span = f"up to {size.max_gib} GiB" if size.max_gib is not None else f"over {low} GiB"
        rows.append(
            [span, ", ".join(size.types("x86_64")), ", ".join(size.types("arm64")),
             f"{size.baseline_mbps('x86_64')} / {size.baseline_mbps('arm64')} Mbps"]
        )  # fmt: skip
        low = size.max_gib or low
    header = ["bytes to copy", "x86_64", "arm64", "baseline EBS bandwidth (slowest type)"]
    return table(header, rows)


def imported(module: str, function: str) -> Callable[[], str]:
    """A renderer living in another module, imported only when its block is rendered."""

    def render() -> str:
        result: str = getattr(importlib.import_module(module), function)()
        return result

    return render


REGISTRY: dict[str, Callable[[], str]] = {
    "contract-tasks": tasks_table,
    "contract-task-summaries": task_summaries,
    "contract-environment": environment_table,
    "contract-limits": limits_table,
    # the batch's own limits and the EBS quotas a batch is sized against
    "batch-limits": lambda: limits_table(("batch", "ebs")),
    "contract-errors": errors_table,
    "contract-dataplane": dataplane_table,
    "contract-execution-input": execution_input_table,
    "contract-summary-line": summary_line_table,
    "contract-results": results_table,
    "contract-plan": plan_table,
    "contract-inspect-line": lambda: summary_line_table("inspectedVolume"),
    "batch-selector": batch_selector_table,
    "settings": settings_table,
    "checkov-suppressions": checkov_table,
    "sizing": sizing_table,
    "workflow": imported("devkit.workflow_table", "workflow_table"),
    "twin-report-fields": imported("twin.report", "fields_table"),
    "metrics": imported("devkit.metrics_table", "metrics_table"),
}


def markdown_files(root: Path = ROOT) -> Iterator[Path]:
    for path in sorted(root.rglob("*.md")):
        if not SKIP_DIRS.intersection(path.relative_to(root).parts):
            yield path


def regenerate(text: str, rendered: dict[str, str]) -> tuple[str, list[str]]:
    """The text with every block rewritten, and the names of the blocks that changed."""
    changed: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in REGISTRY:
            raise KeyError(f"no renderer registered for generated block {name!r} (devkit/docs.py)")
        if name not in rendered:
            rendered[name] = REGISTRY[name]().rstrip("\n") + "\n"
        if match["body"] != rendered[name]:
            changed.append(name)
        return match["begin"] + rendered[name] + match["end"]

    return BLOCK.sub(replace, text), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devkit.docs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    rendered: dict[str, str] = {}
    drift = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        new, changed = regenerate(text, rendered)
        drift += [f"{path.relative_to(ROOT)}: block {name}" for name in changed]
        if changed and not args.check:
            path.write_text(new, encoding="utf-8")
    verb = "differs from what python -m devkit.docs generates" if args.check else "rewritten"
    for line in drift:
        print(f"{line} {verb}", file=sys.stderr if args.check else sys.stdout)
    if args.check and drift:
        print("run `make docs` (python -m devkit.docs) and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
