# SPDX-License-Identifier: Apache-2.0
"""pytest plugin: report every test to automake's harness as TAP.

Loaded with `-p pytest_tap` by tests/Makemodule.am.  Each test becomes one TAP
line ("ok", "not ok" or "ok ... # SKIP reason"), so automake counts tests, not
files, and a file whose tests all skip is a SKIP that names what is missing
("1..0 # SKIP reason"), never pytest's exit status 5 ("no tests collected"),
which the harness would call a failure.  The TAP goes to a duplicate of the
original standard output, so pytest's capturing never swallows it; pytest's
own report stays in the log as diagnostics.
"""

import os

import pytest

_results = []  # (outcome, name, detail) in the order tests finished
_collect_errors = []
_out = None


def _emit(line: str) -> None:
    os.write(_out, (line + "\n").encode())


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ").replace("\n", " ")


def pytest_configure(config):
    global _out
    _out = os.dup(1)


def pytest_collectreport(report):
    if report.failed:
        _collect_errors.append((report.nodeid or "collection", str(report.longrepr)))
    elif report.skipped:
        # A module-level skip: the whole file's reason.
        _results.append(("skip", report.nodeid, _skip_reason(report)))


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    name = report.nodeid
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.skipped:
            if hasattr(report, "wasxfail"):
                _results.append(("xfail", name, str(report.wasxfail)))
            else:
                _results.append(("skip", name, _skip_reason(report)))
        elif report.failed:
            _results.append(("fail", name, report.when))
        else:
            _results.append(("pass", name, ""))
    elif report.when == "teardown" and report.failed:
        _results.append(("fail", name, "teardown"))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _emit("")  # pytest's progress line has no newline yet
    for name, detail in _collect_errors:
        _results.append(("fail", name, "collection error: " + detail.splitlines()[-1] if detail else ""))
    if not _results:
        _emit("1..0 # SKIP no test collected")
        session.exitstatus = pytest.ExitCode.OK
        return
    if all(outcome == "skip" for outcome, _, _ in _results):
        reasons = sorted({detail for _, _, detail in _results})
        _emit("1..0 # SKIP " + "; ".join(reasons))
        session.exitstatus = pytest.ExitCode.OK
        return
    _emit(f"1..{len(_results)}")
    for number, (outcome, name, detail) in enumerate(_results, 1):
        if outcome == "pass":
            _emit(f"ok {number} - {name}")
        elif outcome == "skip":
            _emit(f"ok {number} - {name} # SKIP {detail}")
        elif outcome == "xfail":
            _emit(f"not ok {number} - {name} # TODO {detail}")
        else:
            _emit(f"not ok {number} - {name} ({detail})")
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK
