"""``cubeplug conformance NAME``: run the suite against a backend and print ``N passed, M failed, K skipped``.

The CLI registers it lazily (``LazyCommand("cubeplug.commands.conformance", ...)``): this module
defines ``add_arguments(parser)`` and ``run(args) -> int``. It runs pytest in process on
:mod:`cubeplug.testing.test_conformance`, after checking that the backend can be used at all (an
unusable backend is an error here, where under pytest it is a skip).
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

PLUGIN = "cubeplug.testing.plugin"
SUITE = "cubeplug.testing.test_conformance"
#: Per-test limit of the suite, in seconds: its slowest test takes a few seconds on a software device.
TIMEOUT = 120.0
#: The hard limit (cubeplug.testing.plugin) comes this much after the soft one (pytest-timeout).
HARD_MARGIN = 60.0
#: Worst outcome first: a test's outcome is the worst of its setup, call and teardown.
_RANK = {"failed": 0, "xpassed": 1, "xfailed": 2, "skipped": 3, "passed": 4}


@dataclass(eq=False)
class Tally:
    """Outcomes of a run per test, and the reasons of the skips (a pytest plugin object)."""

    outcomes: dict[str, str] = field(default_factory=dict)
    skip_reasons: Counter[str] = field(default_factory=Counter)

    def pytest_runtest_logreport(self, report: Any) -> None:
        """Fold one phase's report into its test's outcome."""
        if report.passed and report.when != "call":
            return
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        elif report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome = "skipped"
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skip_reasons[reason.removeprefix("Skipped: ")] += 1
        else:
            outcome = "passed"
        old = self.outcomes.get(report.nodeid)
        if old is None or _RANK[outcome] < _RANK[old]:
            self.outcomes[report.nodeid] = outcome

    def count(self, outcome: str) -> int:
        """How many tests ended with ``outcome``."""
        return sum(1 for o in self.outcomes.values() if o == outcome)

    def summary(self) -> str:
        """``N passed, M failed, K skipped`` (plus xfailed / xpassed when there are any)."""
        line = (
            f"{self.count('passed')} passed, {self.count('failed')} failed, {self.count('skipped')} skipped"
        )
        for extra in ("xfailed", "xpassed"):
            if self.count(extra):
                line += f", {self.count(extra)} {extra}"
        return line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommand's arguments."""
    parser.add_argument("backend", metavar="NAME[:DEVICE]", help="backend selector, e.g. cpu, opencl:pocl:0")
    parser.add_argument("--xfails", metavar="FILE", help="node-id substrings expected to fail, one a line")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="only tests matching EXPR (pytest -k)")
    parser.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="list every test")
    parser.add_argument(
        "--timeout", type=float, default=TIMEOUT, metavar="SECONDS",
        help=f"a test still running after SECONDS fails (with pytest-timeout installed); after "
        f"SECONDS + {HARD_MARGIN:g} the run ends with every thread's stack "
        f"(default {TIMEOUT:g}; 0: no limit)",
    )  # fmt: skip
    parser.add_argument(
        "--pytest", dest="pytest_args", metavar="ARGS", default="",
        help='more pytest arguments in one string, e.g. --pytest="-p no:xdist --durations=5"',
    )  # fmt: skip


def plugin_installed() -> bool:
    """True when the suite's pytest plugin is registered through the ``pytest11`` entry point."""
    return any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11"))


def pytest_arguments(args: argparse.Namespace) -> list[str]:
    """The pytest command line for ``args``."""
    argv = ["--pyargs", SUITE, f"--cubeplug-backend={args.backend}", "-p", "no:cacheprovider", "-rfE"]
    if not plugin_installed():
        argv += ["-p", PLUGIN]
    argv.append("-v" * args.verbose if args.verbose else "-q")
    if args.xfails:
        argv.append(f"--cubeplug-xfails={args.xfails}")
    if args.keyword:
        argv += ["-k", args.keyword]
    if args.exitfirst:
        argv.append("-x")
    timeout = getattr(args, "timeout", TIMEOUT) or 0
    if timeout > 0:
        argv.append(f"--cubeplug-timeout={timeout + HARD_MARGIN:g}")
        if importlib.util.find_spec("pytest_timeout") is not None:
            argv.append(f"--timeout={timeout:g}")
    return argv + shlex.split(args.pytest_args or "")


def check_backend(selector: str) -> str:
    """The client's description; raises the selection's error when the backend cannot be used."""
    from cubeplug.testing.backend import BackendUnderTest

    client = BackendUnderTest(selector).client()
    return f"{client.device} [{', '.join(client.server.dialects)}]"


def run(args: argparse.Namespace) -> int:
    """Run the suite; 0 when nothing failed, 1 otherwise (2 without pytest)."""
    try:
        import pytest
    except ImportError:
        print("cubeplug conformance needs pytest: pip install 'cubeplug[test]'", file=sys.stderr)
        return 2
    print(f"cubeplug conformance: {check_backend(args.backend)}")
    sys.stdout.flush()
    tally = Tally()
    code = pytest.main(pytest_arguments(args), plugins=[tally])
    print(tally.summary())
    for reason, n in sorted(tally.skip_reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  skipped {n}: {reason}")
    if not tally.outcomes:
        return 1 if int(code) else 0
    return 1 if tally.count("failed") else 0
