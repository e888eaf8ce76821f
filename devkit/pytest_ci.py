"""The pytest plugin every suite loads (`-p devkit.pytest_ci` in pyproject.toml and
test/lambdas/pytest.ini): one rule for what a test may skip.

A test that needs root, a tool or an interpreter the project's set-up provides says so through
this module (the `needs_root` marker, `needs_tools`, `needs_python39`, `require_root`). Outside CI
it is skipped with a reason naming what to install; under CI=true that skip is a failure, because
CI runs as root after `make setup` and a skipped proof is no proof. Only the reasons in
ALLOWED_SKIPS, what this machine kind truly cannot do, stay skips under CI."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from devkit import needs

# Reason prefix -> why a machine of this project's kind may lack it and still be a valid CI.
ALLOWED_SKIPS: dict[str, str] = {
    "the root filesystem is not on a block device here": (
        "in a container / is an overlay: there is no root disk for `sparsecopy device` to refuse "
        "(on this machine kind / is /dev/vda, and the test runs)"
    ),
    "no cgroup-v1 blkio throttling": (
        "a kernel with only the unified (v2) cgroup hierarchy has no blkio controller; only the "
        "bench's --source-mbps/--source-iops caps use it"
    ),
}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def needs_tools(*tools: str) -> pytest.MarkDecorator:
    """Skip (fail under CI) unless every tool is on PATH; the reason names their packages."""
    missing = needs.missing_tools(tools)
    return pytest.mark.skipif(missing is not None, reason=missing or "")


def needs_python39() -> pytest.MarkDecorator:
    return pytest.mark.skipif(needs.python39() is None, reason=needs.PYTHON_39_MISSING)


def require_root() -> None:
    """For fixtures: what the `needs_root` marker does for a test."""
    if os.geteuid() != 0:
        pytest.skip(needs.ROOT)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_root: uses loop devices and mounts (make test only)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason=needs.ROOT)
        for item in items:
            if "needs_root" in item.keywords:
                item.add_marker(skip)


def allowed(reason: str) -> bool:
    reason = reason.removeprefix("Skipped: ")
    return any(reason.startswith(prefix) for prefix in ALLOWED_SKIPS)


def fail_required_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under CI, turn a skip that is not on ALLOWED_SKIPS into a failure that says why."""
    if not (in_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if allowed(reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true: {reason.removeprefix('Skipped: ')}\n"
        "CI runs as root after `make setup`, so what the set-up provides must be there; "
        "only devkit/pytest_ci.py's ALLOWED_SKIPS may skip in CI."
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    fail_required_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    fail_required_skip(report)
    return report
