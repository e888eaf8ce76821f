"""A representative part of e2fsprogs' regression corpus through `sparsecopy copy`, judged by
e2fsck and debugfs (devkit/e2fs_corpus.py: the oracles; `make corpus` runs all of it).

The part: the nine images sparsecopy lost data on before issue #23 (exit 0, a copy without
files, superblock or indirect blocks the source still had), the two it refused with a bare
"Invalid argument" (sizes not a multiple of 512), an image on which `e2fsck -n` never stops, and
clean images it must still copy by their map."""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit import e2fs_corpus as corpus
from devkit.pytest_ci import needs_tools

# Kept out of `make check` (TIER=unit) with the disks' tests: it fetches the corpus in set-up.
pytestmark = [pytest.mark.needs_root, needs_tools("e2fsck", "debugfs")]


@pytest.fixture(scope="session")
def tests() -> Path:
    return corpus.corpus()


def _checked(tests: Path, name: str, tmp_path: Path) -> corpus.Result:
    result = corpus.check(tests, name, tmp_path)
    assert result.outcome != corpus.FAIL, f"{name}: {result.detail}"
    return result


@pytest.mark.parametrize("name", corpus.LOST_DATA + corpus.LOOPING_CHECKER)
def test_an_inconsistent_source_is_copied_whole_and_said_so(
    tests: Path, name: str, tmp_path: Path
) -> None:
    result = _checked(tests, name, tmp_path)
    assert result.outcome == corpus.FALLBACK, result.detail
    assert result.summary is not None
    assert result.summary["sourceConsistent"] is False
    parts: list[dict] = result.summary["partitions"]  # type: ignore[assignment]
    (part,) = parts
    assert part["consistent"] is False and part["method"] == "raw"
    assert part["note"].startswith("source filesystem inconsistent, e2fsck found: ")
    assert part["note"].endswith("check and repair the source filesystem (fsck)")


@pytest.mark.parametrize("name", corpus.RECORDED_ERRORS)
def test_a_source_whose_superblock_records_errors_is_said_inconsistent(
    tests: Path, name: str, tmp_path: Path
) -> None:
    result = _checked(tests, name, tmp_path)
    assert result.outcome == corpus.FALLBACK and result.summary is not None
    assert result.summary["sourceConsistent"] is False
    parts: list[dict] = result.summary["partitions"]  # type: ignore[assignment]
    assert parts[0]["note"].startswith(
        "source filesystem inconsistent, the kernel found: errors, recorded in the superblock "
        "(filesystem state 'clean with errors'"
    )


@pytest.mark.parametrize("name", corpus.ODD_SIZE)
def test_an_image_of_no_whole_sectors_is_refused_saying_why(
    tests: Path, name: str, tmp_path: Path
) -> None:
    result = _checked(tests, name, tmp_path)
    assert result.outcome == corpus.REFUSED
    assert "not a whole number of 512-byte sectors" in result.detail
    assert "pad the image to a multiple of 512 bytes (truncate -s %512 " in result.detail


@pytest.mark.parametrize("name", corpus.FAITHFUL)
def test_a_consistent_source_is_copied_by_its_map(tests: Path, name: str, tmp_path: Path) -> None:
    result = _checked(tests, name, tmp_path)
    assert result.outcome == corpus.PASS, result.detail
    assert result.summary is not None and result.summary["sourceConsistent"] is True
