"""The lanes of `make test`: every target runs, failures are collected, each log prints whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit import run_targets

MAKEFILE = """\
first:
\t@echo first-line-1; sleep 0.3; echo first-line-2
broken:
\t@echo broken-ran; exit 3
after:
\t@echo after-ran
slow:
\t@echo slow-line-1; sleep 0.2; echo slow-line-2
"""


def test_lanes_run_every_target_and_print_each_log_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    monkeypatch.chdir(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    failed = run_targets.run_lanes([["first", "broken", "after"], ["slow"]], [], reports)
    assert failed == ["broken"]  # and `after` still ran, in the same lane
    out = capsys.readouterr().out
    for target, lines in {
        "first": ["first-line-1", "first-line-2"],
        "broken": ["broken-ran"],
        "after": ["after-ran"],
        "slow": ["slow-line-1", "slow-line-2"],
    }.items():
        header = out.index(f"==> make {target} ")
        block = out[header:].splitlines()[1 : 1 + len(lines)]
        assert block == lines, out
    rows = {
        line.split("\t")[0]: line.split("\t")[1]
        for line in (reports / "times.tsv").read_text().splitlines()
    }
    assert rows == {"first": "0", "broken": "2", "after": "0", "slow": "0"}


def test_each_target_counts_its_own_cpu_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU column is the target's processes', so a busy lane does not charge an idle one."""
    (tmp_path / "burn.py").write_text(
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass\n"
    )
    (tmp_path / "Makefile").write_text("busy:\n\t@python3 burn.py\nidle:\n\t@sleep 1.2\n")
    monkeypatch.chdir(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    assert run_targets.run_lanes([["busy"], ["idle"]], [], reports) == []
    cpu = {
        line.split("\t")[0]: int(line.split("\t")[3])
        for line in (reports / "times.tsv").read_text().splitlines()
    }
    assert cpu == {"busy": 1, "idle": 0}
