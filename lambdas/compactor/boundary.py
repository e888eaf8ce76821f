"""Handler boundaries: what the state machine passes a task, checked against the schema its type
was generated from (compactor/models.py, `SCHEMAS`) and returned typed, instead of trusted.

A payload that does not follow its schema is a workflow bug (the state machine passes the results
of earlier tasks, each checked against its own schema): InvalidInput naming the task's key, the
schema and the first failing value, rather than a KeyError or a wrong call further in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar, cast

import fastjsonschema

from compactor import models, schemas
from compactor.errors import InvalidInput

T = TypeVar("T")


def field(event: Mapping[str, Any], key: str, typed: type[T]) -> T:
    """event[key] as `typed` (a TypedDict of compactor.models), checked against its schema."""
    if key not in event:
        raise InvalidInput(
            f"the task's payload has no {key!r} (keys: {sorted(event)}): the state machine "
            "must pass it (contract/tasks.json); a workflow bug"
        )
    return check(event[key], typed, key)


def optional_field(event: Mapping[str, Any], key: str, typed: type[T]) -> T | None:
    """event[key] as `typed`, or None when the key is absent or null (a first poll)."""
    value = event.get(key)
    return None if value is None else check(value, typed, key)


def check(value: Any, typed: type[T], where: str) -> T:
    """value as `typed`; InvalidInput naming `where` and the first failure unless it follows
    the schema `typed` was generated from. Defaults are not filled in: the value stays as the
    earlier task made it."""
    name = typed.__name__
    file, pointer = models.SCHEMAS[name]
    try:
        _validator(file, pointer)(value)
    except fastjsonschema.JsonSchemaValueException as error:
        raise InvalidInput(
            f"{where!r} is not a {name} ({file}{'#' + pointer if pointer else ''}: "
            f"{error.message.replace('data', where, 1)}): the state machine passed what the "
            "contract does not describe; a workflow bug"
        ) from None
    return cast(T, value)


@cache
def _validator(file: str, pointer: str) -> Callable[[Any], Any]:
    # compiled once per process: Powertools' validate compiles on every call
    return fastjsonschema.compile(schemas.load(file, pointer), use_default=False)


def snapshots_field(event: Mapping[str, Any]) -> models.NewSnapshots | models.SnapshotsResult:
    """event["snapshots"]: create_snapshots' result, or check_snapshots' once it has polled
    (`completed` tells them apart)."""
    snapshots = event.get("snapshots")
    if isinstance(snapshots, Mapping) and "completed" in snapshots:
        return field(event, "snapshots", models.SnapshotsResult)
    return field(event, "snapshots", models.NewSnapshots)
