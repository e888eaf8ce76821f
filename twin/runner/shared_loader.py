"""One botocore data loader for every session of a process.

botocore gives each Session a loader of its own, and a loader parses a JSON file the first time it
is asked for it: the endpoints file and a service's model (EC2's is megabytes) are parsed again
for every new session. moto makes sessions as it builds its backends (again after every reset),
and the twin's own set-up and checks make a client, so a session, per call site: the same files
were parsed many times per execution. With one loader each is parsed once per process.

Used by the Lambda zygote (twin/runner/lambda_zygote.py, which forks its workers with it), by
the emulator's process (twin/emulator/__init__.py) and by the Lambdas' tests (test/lambdas)."""

from __future__ import annotations

from typing import Any


def share_one_loader() -> None:
    """Make every later botocore Session of this process use one loader (a session given its own
    search path keeps its own)."""
    import botocore.loaders
    import botocore.session

    if getattr(botocore.session.create_loader, "shared", False):
        return
    loader = botocore.loaders.create_loader()

    def shared(search_path_string: str | None = None) -> Any:
        return botocore.loaders.create_loader(search_path_string) if search_path_string else loader

    shared.shared = True  # type: ignore[attr-defined]
    botocore.session.create_loader = shared  # type: ignore[assignment]
