"""Command documents as the SSM agent runs them: the one aws:runShellScript step's script with
`{{ Name }}` parameters substituted, checked the way SendCommand checks them."""

from __future__ import annotations

import re
from typing import Any

from moto.ssm.exceptions import SSMException as RESTError
from moto.ssm.models import SimpleSystemManagerBackend

_PARAM = re.compile(r"\{\{\s*([A-Za-z0-9_.:-]+)\s*\}\}")


def render_script(document: dict[str, Any], given: dict[str, list[str]]) -> tuple[str, int]:
    """The shell script of the document's single runShellScript step, parameters substituted,
    and its timeout.  Raises InvalidParameters the way SendCommand does."""
    declared: dict[str, Any] = document.get("parameters") or {}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise RESTError(
            "InvalidParameters", f"Parameters {unknown} are not defined in the document"
        )
    values: dict[str, str] = {}
    for name, spec in declared.items():
        if name in given:
            value = ",".join(given[name])
        elif "default" in spec:
            value = spec["default"] if isinstance(spec["default"], str) else str(spec["default"])
        else:
            raise RESTError("InvalidParameters", f"Parameter {name} is required and was not given")
        pattern = spec.get("allowedPattern")
        if pattern and not re.search(pattern, value):
            raise RESTError(
                "InvalidParameters",
                f"Parameter {name} value {value!r} does not match allowedPattern {pattern}",
            )
        allowed = spec.get("allowedValues")
        if allowed and value not in allowed:
            raise RESTError(
                "InvalidParameters", f"Parameter {name} value {value!r} is not one of {allowed}"
            )
        values[name] = value

    steps = [s for s in document.get("mainSteps", []) if s.get("action") == "aws:runShellScript"]
    if len(steps) != 1:
        raise RESTError(
            "InvalidDocument", "the twin runs documents with exactly one aws:runShellScript step"
        )
    inputs = steps[0].get("inputs", {})
    commands = inputs.get("runCommand", [])
    lines = [commands] if isinstance(commands, str) else list(commands)

    def substitute(text: str) -> str:
        return _PARAM.sub(lambda m: values.get(m.group(1), m.group(0)), text)

    timeout = int(substitute(str(inputs.get("timeoutSeconds", 3600))))
    return "\n".join(substitute(line) for line in lines) + "\n", timeout


def document_content(backend: SimpleSystemManagerBackend, name: str) -> dict[str, Any] | None:
    documents = backend._documents.get(name)
    if documents is None:
        return None
    return documents.get_default_version().content_json  # type: ignore[no-any-return]
