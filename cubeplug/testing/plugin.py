"""The conformance suite's pytest plugin (entry point ``pytest11``: ``cubeplug = cubeplug.testing.plugin``).

Options: ``--cubeplug-backend=NAME[:DEVICE]`` (any selector) picks the backend of
``pytest --pyargs cubeplug.testing``; ``--cubeplug-xfails=FILE`` marks the tests whose node id contains
a line of FILE (``#`` starts a comment) as expected failures, and reports the entries whose tests
passed (so lists shrink) and those that matched no test. The plugin is loaded in every pytest run
of an environment where cubeplug is installed, so it costs nothing unless its options are used.
"""

from __future__ import annotations

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


def pytest_configure(config: pytest.Config) -> None:
    """Read the xfail list once."""
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
