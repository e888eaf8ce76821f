"""moto itself, as the emulator runs it: its threaded server with the twin's fault injection in
front, a fresh cloud per emulator, public SSM parameters moto's API refuses to write, and its
lookup of a request's action method remembered."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import moto.core.responses
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from .injection import Middleware


class TwinServer(ThreadedMotoServer):
    """moto's threaded server with the twin's fault injection in front (injection.py)."""

    def __init__(self, account: str, region: str) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self._account, self._region = account, region

    def _server_entry(self) -> None:
        app = Middleware(
            DomainDispatcherApplication(create_backend_app), self._account, self._region
        )
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


def publish_parameter(account: str, region: str, name: str, value: str) -> None:
    """A new version of a public (aws-prefixed) parameter, which PutParameter refuses to write."""
    from moto.core.utils import utcnow
    from moto.ssm.models import Parameter, ssm_backends

    versions = ssm_backends[account][region]._parameters[name]  # loads moto's own versions first
    versions.append(
        Parameter(  # type: ignore[abstract]  # moto instantiates it the same way
            account_id=account,
            name=name,
            value=value,
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=(versions[-1].version + 1) if versions else 1,
            data_type="aws:ec2:image",
        )
    )


def reset_moto() -> None:
    """moto's backends are process-wide: each emulator starts from an empty cloud."""
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()


@functools.cache
def _method_names(clazz: type, _shape: tuple[int, ...]) -> list[str]:
    return [name for name, _ in inspect.getmembers(clazz, predicate=inspect.isfunction)]


def remember_action_methods() -> None:
    """moto lists a response class's methods with inspect.getmembers on every request it
    dispatches (a tenth of the emulator's CPU a run); the list is remembered per class and per
    number of attributes of each class of its MRO, so a method the twin adds (patching.py) is
    seen at once."""

    def method_names(clazz: Any) -> list[str]:
        return _method_names(clazz, tuple(len(vars(c)) for c in clazz.__mro__))

    moto.core.responses.method_names_from_class = method_names  # type: ignore[assignment]
