"""devkit.generate: the files generated from contract/ are fresh, a change to contract/ makes them
stale (and `--check` fail) until they are regenerated, the data plane's module holds exactly
contract/dataplane.json's constants and the limits it names, and each named schema part is one
type of the Lambdas' models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from devkit import generate


def test_every_generated_file_is_what_contract_makes() -> None:
    assert generate.stale() == {}
    assert generate.main(["--check"]) == 0


@pytest.fixture
def changed_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of contract/ the generators read instead, with the EBS block size changed."""
    copy = tmp_path / "contract"
    shutil.copytree(generate.CONTRACT, copy)
    path = copy / "dataplane.json"
    data = json.loads(path.read_text())
    data["constants"]["ebsBlockBytes"]["value"] = 1048576
    path.write_text(json.dumps(data))
    monkeypatch.setattr(generate, "CONTRACT", copy)
    return copy


def test_a_changed_constant_makes_the_data_planes_module_stale(
    changed_contract: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = generate.stale()
    assert list(stale) == ["ssm-documents/sparsecopy/shared.py"]
    assert "\nEBS_BLOCK_BYTES = 1048576\n" in stale["ssm-documents/sparsecopy/shared.py"]
    assert generate.main(["--check"]) == 1
    assert "ssm-documents/sparsecopy/shared.py differs" in capsys.readouterr().err


def test_a_changed_schema_field_makes_the_lambdas_types_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "contract"
    shutil.copytree(generate.CONTRACT, copy)
    path = copy / "schemas" / "plan.schema.json"
    plan = json.loads(path.read_text())
    plan["properties"]["jobs"]["type"] = "string"
    path.write_text(json.dumps(plan))
    monkeypatch.setattr(generate, "CONTRACT", copy)
    models = "lambdas/compactor/models.py"
    stale = generate.stale({models: generate.OUTPUTS[models]})
    assert "\n    jobs: str\n" in stale[models]


def test_each_named_schema_part_is_one_python_type() -> None:
    definitions = generate.payload_schema()["definitions"]
    assert set(definitions) == set(generate.TYPE_NAMES.values())
    models = generate.payload_types()
    for name in definitions:
        assert f"\nclass {name}(TypedDict):\n" in models or f"\n{name}: TypeAlias = " in models


def test_the_data_planes_module_holds_each_shared_value() -> None:
    namespace: dict[str, object] = {}
    exec(generate.dataplane_constants(), namespace)
    values = {k: v for k, v in namespace.items() if k.isupper()}
    expected = {generate.constant_name(n): e["value"] for n, e in generate.dataplane_entries()}
    assert values == expected
    assert values["EBS_BLOCK_BYTES"] == 512 * 1024
    assert (
        values["MAX_VOLUMES_PER_JOB"]
        == generate.contract("limits")["limits"]["maxVolumesPerJob"]["value"]
    )


def test_names_become_constants() -> None:
    assert generate.constant_name("maxVolumesPerJob") == "MAX_VOLUMES_PER_JOB"
    assert generate.constant_name("ebsBlockBytes") == "EBS_BLOCK_BYTES"
