"""The conformance suite's pytest plugin (entry point ``pytest11``: ``cubeplug = cubeplug.testing.plugin``).

Options: ``--cubeplug-backend=NAME[:DEVICE]`` (any selector) picks the backend of
``pytest --pyargs cubeplug.testing``; ``--cubeplug-xfails=FILE`` marks the tests whose node id contains
a line of FILE (``#`` starts a comment) as expected failures, and reports the entries whose tests
passed (so lists shrink) and those that matched no test; ``--cubeplug-timeout=SECONDS`` (or the ini
value ``cubeplug_timeout``) is a hard limit per test: a test still running then (a backend hung in a
driver call, where no exception can reach it) gets every thread's stack printed and ends the run,
so a hanging backend costs seconds, not a CI job's whole time limit. The plugin is loaded in every
pytest run of an environment where cubeplug is installed, so it costs nothing unless its options are
used.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cubeplug.testing.fixtures import (
    cubeplug_backend,
    cubeplug_client,
    cubeplug_cpu_client,
    cubeplug_fresh_client,
    cubeplug_new_client,
)

__all__ = [
    "XfailList",
    "cubeplug_backend",
    "cubeplug_client",
    "cubeplug_cpu_client",
    "cubeplug_fresh_client",
    "cubeplug_new_client",
    "read_xfails",
]

_KEY = pytest.StashKey["XfailList"]()
_TIMEOUT = pytest.StashKey[float]()


def read_xfails(path: str | Path) -> list[str]:
    """The entries of an xfail list: one node-id substring a line, ``#`` comments and blank lines ignored."""
    entries = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            entries.append(entry)
    return entries


@dataclass
class XfailList:
    """An xfail list and what became of its entries in this run."""

    path: str
    entries: list[str]
    matched: dict[str, list[str]] = field(default_factory=dict)
    passed: dict[str, list[str]] = field(default_factory=dict)

    def entry_for(self, nodeid: str) -> str | None:
        """The first entry contained in ``nodeid``."""
        return next((e for e in self.entries if e in nodeid), None)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cubeplug-backend`` and ``--cubeplug-xfails``."""
    group = parser.getgroup("cubeplug", "cubeplug conformance suite")
    group.addoption(
        "--cubeplug-backend",
        dest="cubeplug_backend",
        metavar="NAME[:DEVICE]",
        default=None,
        help="backend selector the conformance suite runs against (e.g. opencl:pocl:0); "
        "a test module's CUBEPLUG_BACKEND takes precedence unless this names the same backend",
    )
    group.addoption(
        "--cubeplug-xfails",
        dest="cubeplug_xfails",
        metavar="FILE",
        default=None,
        help="file of node-id substrings (one a line, # comments) expected to fail; passes are reported",
    )
    group.addoption(
        "--cubeplug-timeout",
        dest="cubeplug_timeout",
        metavar="SECONDS",
        type=float,
        default=None,
        help="hard limit per test: print every thread's stack and end the run "
        "(default: the ini value cubeplug_timeout)",
    )
    parser.addini("cubeplug_timeout", "hard limit per test in seconds (0: none)", default="0")


def pytest_configure(config: pytest.Config) -> None:
    """Read the xfail list and the hard per-test limit once."""
    config.stash[_TIMEOUT] = hard_timeout(config)
    path = config.getoption("cubeplug_xfails", default=None)
    if path:
        try:
            entries = read_xfails(path)
        except OSError as e:
            raise pytest.UsageError(f"--cubeplug-xfails: cannot read {path}: {e}") from e
        config.stash[_KEY] = XfailList(str(path), entries)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Which backend and xfail list the suite uses, when the options are given."""
    lines = []
    backend = config.getoption("cubeplug_backend", default=None)
    if backend:
        lines.append(f"cubeplug conformance backend: {backend}")
    xfails = config.stash.get(_KEY, None)
    if xfails is not None:
        lines.append(f"cubeplug xfail list: {xfails.path} ({len(xfails.entries)} entries)")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests named by the xfail list."""
    xfails = config.stash.get(_KEY, None)
    if xfails is None:
        return
    for item in items:
        entry = xfails.entry_for(item.nodeid)
        if entry is not None:
            xfails.matched.setdefault(entry, []).append(item.nodeid)
            item.add_marker(pytest.mark.xfail(reason=f"listed in {xfails.path}: {entry}", strict=False))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Report xfail entries whose tests passed, and entries that matched no test."""
    xfails = config.stash.get(_KEY, None)
    if xfails is None:
        return
    for report in terminalreporter.stats.get("xpassed", []):
        entry = xfails.entry_for(report.nodeid)
        if entry is not None:
            xfails.passed.setdefault(entry, []).append(report.nodeid)
    unused = [e for e in xfails.entries if e not in xfails.matched]
    if not xfails.passed and not unused:
        return
    terminalreporter.section("cubeplug xfail list")
    for entry, nodeids in xfails.passed.items():
        terminalreporter.write_line(
            f"XPASS {entry!r}: {len(nodeids)} test(s) passed; remove the entry from {xfails.path}"
        )
    for entry in unused:
        terminalreporter.write_line(f"UNUSED {entry!r}: matches no collected test in {xfails.path}")


def hard_timeout(config: pytest.Config) -> float:
    """The hard per-test limit in seconds (0: none): the option, else the ini value."""
    value = config.getoption("cubeplug_timeout", default=None)
    if value is None:
        raw = config.getini("cubeplug_timeout")
        try:
            value = float(raw or 0)
        except ValueError as e:
            raise pytest.UsageError(f"cubeplug_timeout must be a number of seconds, got {raw!r}") from e
    return max(0.0, float(value))


def _expire(item: pytest.Item, seconds: float) -> None:
    """A test outlived the hard limit: say which, show every thread's stack, end the process."""
    nodeid = item.nodeid
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:  # write to the real stderr, with what the test printed so far
        capman.suspend_global_capture(in_=True)
        out, err = capman.read_global_capture()
        sys.stdout.write(out)
        sys.stderr.write(err)
    sys.stderr.write(
        f"\ncubeplug: {nodeid} still runs after {seconds:g} s (hard per-test limit, cubeplug_timeout); "
        "the stacks of every thread follow, and the run ends here\n"
    )
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Arm the hard per-test limit around setup, call and teardown."""
    seconds = item.config.stash.get(_TIMEOUT, 0.0)
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, _expire, (item, seconds))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
