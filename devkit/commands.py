"""Running the system tools the dev kit drives (losetup, mount, mkfs, sfdisk, ...)."""

from __future__ import annotations

import os
import subprocess


class CommandError(RuntimeError):
    """A tool exited non-zero; the message names the command line and its stderr."""


def run(*args: str, input_: bytes | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command and return its stdout; raise CommandError with its stderr when it fails.
    ``env``: variables added to this process's environment for the command."""
    proc = subprocess.run(
        list(args),
        input=input_,
        capture_output=True,
        check=False,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        raise CommandError(
            f"{' '.join(args)} failed ({proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode(errors="replace")
