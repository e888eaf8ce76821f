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


# The longest tests, longest first (the rehearsal of bb73cc4, 3 workers: the legacy-BIOS Debian
# boot 684 s with the Debian cache built cold inside it, the representative sweep 362 s, the UEFI
# boot 190 s), then the files of long tests.
LONGEST = (
    "test_the_new_ami_of_a_debian_image_boots[legacy-bios-bios]",
    "test_representative_part_of_the_sweep_holds_diskless",
    "test_the_new_ami_of_a_debian_image_boots[uefi-uefi]",
)
LONG_FILES = ("test_debian_boot.py", "test_sweep.py", "test_ebs_direct_aws.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first, dealt round-robin to the workers. pytest-xdist's worksteal scheduler first
    hands each of N workers a contiguous 1/N of the list, and a worker that runs dry steals from
    the end of another's queue: sorted longest first only, the first worker got every long test
    and ran them one after the other while the machine sat mostly idle (the last ~4 minutes of
    make test). Dealt, worker i starts with the i-th longest."""

    def rank(item: pytest.Item) -> int:
        if item.name in LONGEST:
            return LONGEST.index(item.name)
        name = item.path.name
        return len(LONGEST) + (LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES))

    items.sort(key=rank)  # stable: the rest keep their order
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = [item for first in range(workers) for item in items[first::workers]]
