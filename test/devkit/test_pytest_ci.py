"""devkit/pytest_ci.py, run as every suite runs it: a skip of what the set-up provides is a
failure under CI=true and a skip outside it; an allowed skip stays a skip."""

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest
from devkit.pytest_ci import needs_tools

@needs_tools("grub-install")
def test_boots():
    pass

def test_root_fs():
    pytest.skip("the root filesystem is not on a block device here")

@pytest.mark.needs_root
def test_loops():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_known():
    raise AssertionError

def test_plain():
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The suite above on a PATH without grub-install, as a user that is not root."""
    monkeypatch.setenv("PATH", str(pytester.path))
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_outside_ci_what_is_missing_is_skipped_naming_its_package(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    result = suite.runpytest("-p", "devkit.pytest_ci", "-rs")
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
    result.stdout.fnmatch_lines(["*needs grub-install (Debian package grub2-common)*"])


def test_under_ci_a_skip_of_what_the_set_up_provides_fails(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = suite.runpytest("-p", "devkit.pytest_ci", "-rs")
    # a skip in a fixture or a mark happens at set-up: pytest reports its failure as an error
    result.assert_outcomes(passed=1, errors=2, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*skipped under CI=true: needs grub-install (Debian package grub2-common)*",
            "*skipped under CI=true: needs root*",
            "SKIPPED*the root filesystem is not on a block device here",
        ]
    )


def test_a_module_skipped_at_collection_fails_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        test_module="import pytest\npytest.skip('needs qemu', allow_module_level=True)\n"
    )
    result = pytester.runpytest("-p", "devkit.pytest_ci")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped under CI=true: needs qemu*"])
