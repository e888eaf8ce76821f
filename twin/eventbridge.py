"""EventBridge as the deployed rules see it: pattern matching (moto's implementation of the
event-pattern language) and target input (Input, InputPath, InputTransformer as AWS applies it)."""

from __future__ import annotations

import datetime
import json
import re
import uuid
from typing import Any

from moto.events.models import EventPattern

_MISSING = object()
_PLACEHOLDER = re.compile(r"<([A-Za-z0-9_.\-]+)>")
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    return bool(EventPattern.load(json.dumps(pattern)).matches_event(event))  # type: ignore[arg-type]


def json_path(event: Any, path: str) -> Any:
    """The JSON paths EventBridge accepts in InputPath/InputPathsMap: dot notation and indexes."""
    if not path.startswith("$"):
        raise ValueError(f"input path {path!r} must start with $")
    node = event
    for name, index in _STEP.findall(path[1:]):
        if index:
            if not isinstance(node, list) or int(index) >= len(node):
                return _MISSING
            node = node[int(index)]
        else:
            if not isinstance(node, dict) or name not in node:
                return _MISSING
            node = node[name]
    return node


def _inside_string(text: str, position: int) -> bool:
    """Whether position in a JSON template lies inside a string literal."""
    inside, escaped = False, False
    for char in text[:position]:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            inside = not inside
    return inside


def transform(target: dict[str, Any], event: dict[str, Any], rule_arn: str, rule_name: str) -> Any:
    """The input the target receives for this event."""
    if "Input" in target:
        return json.loads(target["Input"])
    if "InputPath" in target:
        value = json_path(event, target["InputPath"])
        return None if value is _MISSING else value
    transformer = target.get("InputTransformer")
    if not transformer:
        return event
    values: dict[str, Any] = {
        name: json_path(event, path) for name, path in transformer.get("InputPathsMap", {}).items()
    }
    values.setdefault("aws.events.event.json", event)
    values.setdefault("aws.events.event", json.dumps(event))
    values.setdefault("aws.events.rule-arn", rule_arn)
    values.setdefault("aws.events.rule-name", rule_name)
    values.setdefault("aws.events.event.ingestion-time", event.get("time"))
    template: str = transformer["InputTemplate"]

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in values:
            return m.group(0)
        value = values[name]
        if _inside_string(template, m.start()):
            # Inside quotes EventBridge inserts the text of the value.
            if value is _MISSING:
                return ""
            text = value if isinstance(value, str) else json.dumps(value)
            return json.dumps(text)[1:-1]
        # Outside quotes it inserts the value as JSON (strings get their quotes).
        return "null" if value is _MISSING else json.dumps(value)

    filled = _PLACEHOLDER.sub(fill, template)
    try:
        return json.loads(filled)
    except ValueError:
        return filled  # a text template stays text


def event(
    detail_type: str,
    source: str,
    region: str,
    account: str,
    resources: list[str],
    detail: dict[str, Any],
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """An AWS service event as EventBridge carries it: the envelope around `detail`."""
    now = now or datetime.datetime.now(datetime.UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": resources,
        "detail": detail,
    }


def status_change_event(
    region: str,
    account: str,
    execution_arn: str,
    state_machine_arn: str,
    name: str,
    status: str,
    execution_input: Any,
    output: Any = None,
) -> dict[str, Any]:
    """The "Step Functions Execution Status Change" event Step Functions sends to EventBridge."""
    now = datetime.datetime.now(datetime.UTC)
    millis = int(now.timestamp() * 1000)
    detail = {
        "executionArn": execution_arn,
        "stateMachineArn": state_machine_arn,
        "name": name,
        "status": status,
        "startDate": millis,
        "stopDate": millis,
        "input": json.dumps(execution_input),
        "output": None if output is None else json.dumps(output),
        "inputDetails": {"included": True},
        "outputDetails": {"included": True} if output is not None else None,
    }
    return event(
        "Step Functions Execution Status Change", "aws.states", region, account,
        [execution_arn], detail, now,
    )  # fmt: skip


def deliveries(
    rules: list[Any], event: dict[str, Any], region: str, account: str
) -> list[tuple[Any, dict[str, Any], Any]]:
    """(rule, target, the target's input) for every target of every deployed rule the event
    matches, as EventBridge would deliver it."""
    out = []
    for rule in rules:
        if not matches(rule.pattern, event):
            continue
        rule_arn = f"arn:aws:events:{region}:{account}:rule/{rule.name}"
        for target in rule.targets:
            out.append((rule, target, transform(target, event, rule_arn, rule.name)))
    return out
