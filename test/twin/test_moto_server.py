"""twin/emulator/moto_server.py: moto's lookup of a response class's action methods is
remembered per class, and a method added to the class later (the twin's patches) is seen."""

from __future__ import annotations

import moto.core.responses

import twin.emulator  # noqa: F401 - installs the remembered lookup
from twin.emulator import moto_server


class _Response:
    def describe_things(self) -> None:
        pass


def test_action_methods_are_remembered_and_a_method_added_later_is_seen() -> None:
    lookup = moto.core.responses.method_names_from_class
    assert lookup(_Response) == ["describe_things"]
    hits = moto_server._method_names.cache_info().hits
    assert lookup(_Response) == ["describe_things"]
    assert moto_server._method_names.cache_info().hits == hits + 1
    _Response.register_thing = lambda self: None  # type: ignore[attr-defined]
    assert lookup(_Response) == ["describe_things", "register_thing"]
