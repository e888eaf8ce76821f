import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.pytest_ci import require_root
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def root_only() -> None:
    require_root()


@pytest.fixture
def emulator(tmp_path: Path, root_only: None) -> Iterator[Emulator]:
    """A fresh emulator (moto's server with the twin's behaviour), stopped and cleaned after."""
    with Emulator(tmp_path / "emu", Faults()) as emu:
        yield emu


@pytest.fixture(scope="session")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthesized stack the twin deploys: TWIN_CDK_OUT (make test-twin synthesizes it once),
    else a synth of this checkout."""
    require_root()
    given = os.environ.get("TWIN_CDK_OUT")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("synth") / "cdk.out"
    subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "-o", str(out)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    return out
