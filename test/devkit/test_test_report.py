"""devkit/test_report.py: the table and the skips at the end of `make test`."""

import json
from pathlib import Path

import pytest

from devkit import test_report

pytest_plugins = ["pytester"]


def test_the_table_and_every_skip_with_its_reason(
    tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "times.tsv").write_text("setup\t0\t7\ntest-lambdas\t1\t125\t190\n")
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(
        test_x="""
import pytest

def test_a(): pytest.skip("needs grub-install")
def test_b(): pytest.skip("needs grub-install")
@pytest.mark.xfail(reason="known")
def test_c(): raise AssertionError
def test_d(): pass
"""
    )
    pytester.runpytest(f"--junitxml={tmp_path / 'test-boot.xml'}")
    jest = {"testResults": [{"assertionResults": [
        {"status": "passed", "fullName": "stack synthesizes"},
        {"status": "pending", "fullName": "stack later"},
    ]}]}  # fmt: skip
    (tmp_path / "test-cdk.jest.json").write_text(json.dumps(jest))
    assert test_report.render(tmp_path).splitlines() == [
        "target         rc       wall        cpu",
        "setup           0       0:07           ",
        "test-lambdas    1       2:05       3:10",
        "total                   2:12       3:10",
        "skipped tests: 3",
        "  2 x test-boot: needs grub-install",
        "  1 x test-cdk: stack later",
    ]


def test_no_reports_is_no_skips(tmp_path: Path) -> None:
    assert test_report.render(tmp_path) == "skipped tests: 0"


def test_the_total_is_the_runs_wall_time_when_recorded(tmp_path: Path) -> None:
    """Lanes overlap: the total is the run's own time, not the sum of its targets."""
    rows = "setup\t0\t7\nlint\t0\t60\t50\ntest-twin\t0\t600\t900\nwall\t0\t620\n"
    (tmp_path / "times.tsv").write_text(rows)
    assert test_report.render(tmp_path).splitlines()[-3:-1] == [
        "test-twin    0      10:00      15:00",
        "total               10:20      15:50",
    ]
