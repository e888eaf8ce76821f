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


# The longest tests first, so that pytest-xdist's workers do not end on them one by one.
LONGEST_FIRST = ("test_debian_boot.py", "test_sweep.py", "test_ebs_direct_aws.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
