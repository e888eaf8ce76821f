import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices)")


@pytest.fixture(scope="session")
def cdk_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthesized stack the twin deploys: TWIN_CDK_OUT (make test-twin synthesizes it once),
    else a synth of this checkout."""
    if os.geteuid() != 0:
        pytest.skip("needs root (loop devices, mounts)")
    given = os.environ.get("TWIN_CDK_OUT")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("synth") / "cdk.out"
    subprocess.run(
        ["npx", "cdk", "synth", "--quiet", "-o", str(out)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    return out
