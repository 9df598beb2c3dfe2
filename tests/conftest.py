"""Suite-wide policy: under CI (``CI=true``) a skipped test is a failed test.

A test skips when what it needs is missing (tshark, tcpdump, Prometheus, Chromium, root for
the lab, the C extensions, the shared captures). On a developer's machine that is a skip with
its reason; in CI, where `make test` installs everything, it would be a check that silently
never ran, so it is reported as a failure naming what was missing.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _skip_reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (everything a test needs must be installed by `make test`): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    _fail_skip(outcome.get_result())
