"""The ``cubeplug`` command: ``list`` and ``doctor``, and a registry other subcommands plug into.

``cubeplug list [--probe]`` shows every backend with its distribution and status; only ``--probe``
imports plugins. ``cubeplug doctor [--json] [--backend NAME]`` reports versions, every effective
config value with its origin, the ``CUBEPLUG_*`` variables, the entry points and, per backend (probed
in a subprocess with a timeout), devices, properties, capabilities and memory usage. Doctor never
crashes: each section is guarded, and home paths are shown as ``~``.

Other modules add subcommands to :data:`COMMANDS`, either as a :class:`Command` or as a
:class:`LazyCommand` naming a module (imported only when that subcommand runs) that defines
``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cubeplug
from cubeplug.commands.output import Output, jsonable, redact
from cubeplug.core.errors import CubeplugError

# The registry, the settings and the subcommands' modules are imported inside the commands that use
# them: ``cubeplug --help`` and ``--version`` start without the client and numpy behind them.


@dataclass(frozen=True)
class Command:
    """A subcommand: one line of help, a function adding its arguments, and one running it."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class LazyCommand:
    """A subcommand whose module (with ``add_arguments`` and ``run``) is imported only when it runs."""

    module: str
    help: str

    def resolve(self) -> Command:
        """Import the module and return the command it defines."""
        mod = importlib.import_module(self.module)
        return Command(self.help, mod.add_arguments, mod.run)


#: Every subcommand by name; e.g. ``COMMANDS["bench"] = LazyCommand("cubeplug.bench_cli", "run benchmarks")``.
COMMANDS: dict[str, Command | LazyCommand] = {}


def register_command(name: str, command: Command | LazyCommand) -> None:
    """Add a subcommand (``bench``, ``conformance``, ``cache``, ...)."""
    COMMANDS[name] = command


# ---------------------------------------------------------------------------------------- list
def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", action="store_true", help="import every plugin and probe its backends")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _list_run(args: argparse.Namespace) -> int:
    from cubeplug.registry.plugins import registry

    reg = registry()
    rows = reg.listing(probe=args.probe)
    if args.json:
        print(json.dumps(redact(jsonable(rows)), indent=2))
    else:
        Output(args.plain).table(
            "cubeplug backends",
            ["name", "distribution", "status", "reason"],
            [redact([r.name, r.dist, r.status, r.reason]) for r in rows],
        )
    return 1 if reg.strict and any(r.status == "failed" for r in rows) else 0


# ---------------------------------------------------------------------------------------- doctor
def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--backend", metavar="NAME", help="report on this backend only")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per backend probe")


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except BaseException as exc:  # doctor never crashes
        if isinstance(exc, KeyboardInterrupt):
            raise
        return {"error": f"{type(exc).__name__}: {exc}"}


def _versions() -> dict[str, Any]:
    from importlib import metadata
    out: dict[str, Any] = {
        "cubeplug": cubeplug.__version__,
        "cubeplug path": str(Path(cubeplug.__file__).parent),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "os": platform.platform(),
        "machine": platform.machine(),
    }
    for dist in ("pluggy", "numpy", "platformdirs", "rich"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _config_section() -> dict[str, Any]:
    from cubeplug.registry.settings import effective_config, user_config_path

    eff = effective_config()
    out: dict[str, Any] = {
        "files": list(eff.files) or ["(none: defaults and environment only)"],
        "user config path": str(user_config_path()),
    }
    if eff.notes:
        out["notes"] = list(eff.notes)
    out["values"] = [{"key": k, "value": v, "origin": str(o)} for k, v, o in eff.items()]
    return out


def _env_section() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("CUBEPLUG_")}


def _entry_points_section() -> list[dict[str, Any]]:
    from cubeplug.registry.plugins import registry

    return [
        {"name": e.name, "value": e.value, "distribution": e.label, "status": e.status, "reason": e.reason}
        for e in registry().entries().values()
    ]


def _cache_section() -> dict[str, Any]:
    import platformdirs

    out: dict[str, Any] = {}
    for label, path in (
        ("cache", platformdirs.user_cache_dir("cubeplug")),
        ("config", platformdirs.user_config_dir("cubeplug")),
        ("data", platformdirs.user_data_dir("cubeplug")),
    ):
        p = Path(path)
        if p.is_dir():
            size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            subdirs = sorted(d.name for d in p.iterdir() if d.is_dir())
            out[label] = {"path": str(p), "bytes": size, "subdirectories": subdirs}
        else:
            out[label] = {"path": str(p), "exists": False}
    return out


def _selection_report() -> dict[str, Any]:
    from cubeplug.registry.selection import select

    chosen = select()
    return {
        "selector": str(chosen.selector),
        "origin": chosen.origin,
        "backend": chosen.backend,
        "device": chosen.device,
        "skipped": {name: reason for name, reason in chosen.skipped},
    }


def backend_report(name: str) -> dict[str, Any]:
    """Everything doctor shows about one backend; run in a subprocess by ``cubeplug doctor``."""
    from cubeplug.registry.plugins import registry

    reg = registry()
    out: dict[str, Any] = {"name": name}
    try:
        backend = reg.backend(name)
    except Exception as exc:
        out["status"] = "failed"
        out["error"] = str(exc)
        if exc.__cause__ is not None:
            out["cause"] = f"{type(exc.__cause__).__name__}: {exc.__cause__}"
        return out
    spec = backend.spec
    out["distribution"] = backend.entry.label
    out["spec"] = {
        "description": spec.description,
        "kind": spec.kind,
        "dialects": list(spec.dialects),
        "priority": spec.priority,
        "api_version": spec.api_version,
        "install_hint": spec.install_hint,
    }
    probe = reg.probe(name)
    out["status"] = "ok" if probe.ok else "unavailable"
    out["probe"] = {"ok": probe.ok, "reason": probe.reason, "devices": list(probe.devices),
                    "software device": probe.software, **probe.details}  # fmt: skip
    if probe.ok:  # an unavailable backend has no device to open or describe
        out["client"] = _guard(lambda: _client_report(name))
        out["memory properties"] = _guard(lambda: reg.memory_properties(name, 0))
    out["diagnostics"] = _guard(lambda: reg.diagnostics(name))
    return out


def _client_report(name: str) -> dict[str, Any]:
    from cubeplug.registry.selection import client

    made = client(name)
    return {
        "device": made.device,
        "properties": made.properties,
        "capabilities": made.capabilities,
        "memory usage": made.memory_usage(),
    }


def _in_subprocess(code: str, timeout: float) -> Any:
    # -I: isolated mode, so the working directory is not put first on the child's sys.path (a json.py
    # there would run); the child gets this process's own import path, set by the code itself.
    preamble = f"import sys, warnings\nsys.path[:] = {_paths()!r}\nwarnings.simplefilter('ignore')\n"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", preamble + code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"error": f"subprocess exited with {proc.returncode}", "output": tail}
    return json.loads(lines[-1])


def _paths() -> list[str]:
    """This process's import path, so that the probing subprocess sees the same plugins.

    An empty entry (the working directory) is kept only where cubeplug itself is imported from
    there (``python -m cubeplug`` in a source tree); the ``cubeplug`` command has none.
    """
    here = os.getcwd()
    needs_cwd = Path(cubeplug.__file__).resolve().parents[1] == Path(here).resolve()
    return [p or here for p in sys.path if p or needs_cwd]


def _report_code(call: str) -> str:
    # _guard: an error in the child (a malformed config file, say) comes back as {"error": ...},
    # not as a traceback.
    return (
        "import json, sys\nfrom cubeplug import cli\n"
        f"print(); print(json.dumps(cli.jsonable(cli._guard(lambda: {call}))))\nsys.stdout.flush()\n"
    )


def doctor_report(backend: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """The whole doctor report as a JSON-friendly mapping, home paths redacted."""
    from cubeplug.registry.plugins import registry

    report: dict[str, Any] = {
        "versions": _guard(_versions),
        "config": _guard(_config_section),
        "environment": _guard(_env_section),
        "entry points": _guard(_entry_points_section),
    }
    names = [backend] if backend else _guard(lambda: registry().names())
    if not isinstance(names, list):
        names = []
    if backend is None:
        report["selection"] = _guard(lambda: _in_subprocess(_report_code("cli._selection_report()"), timeout))
    backends: dict[str, Any] = {}
    for name in names:
        code = _report_code(f"cli.backend_report({name!r})")
        backends[name] = _guard(functools.partial(_in_subprocess, code, timeout))
    report["backends"] = backends
    report["cache directories"] = _guard(_cache_section)
    return dict(redact(jsonable(report)))


def _broken_config(report: Mapping[str, Any]) -> str | None:
    """The configuration's error, when a config file or variable cannot be read."""
    config = report.get("config")
    return str(config["error"]) if isinstance(config, Mapping) and "error" in config else None


def _doctor_run(args: argparse.Namespace) -> int:
    """Print the report; exit 1 when the configuration is broken (every backend is affected then)."""
    report = doctor_report(args.backend, args.timeout)
    broken = _broken_config(report)
    if args.json:
        print(json.dumps(report, indent=2))
        return 1 if broken else 0
    out = Output(args.plain)
    out.section("versions", report["versions"])
    config = report["config"]
    if isinstance(config, dict) and "values" in config:
        out.section("config files", {k: v for k, v in config.items() if k != "values"})
        out.table(
            "effective config", ["key", "value", "origin"], [list(v.values()) for v in config["values"]]
        )
    else:
        out.section("config", config)
    out.section("CUBEPLUG_* variables", report["environment"] or "(none set)")
    entries = report["entry points"]
    if isinstance(entries, list):
        rows = [[e["name"], e["value"], e["distribution"], e["status"], e["reason"]] for e in entries]
        out.table(
            "entry points (cubeplug.backends)", ["name", "module", "distribution", "status", "reason"], rows
        )
    else:
        out.section("entry points", entries)
    if "selection" in report:
        out.section("selection (cubeplug.client())", report["selection"])
    for name, data in report["backends"].items():
        out.section(f"backend {name}", data)
    out.section("cache directories", report["cache directories"])
    if broken:
        print(f"cubeplug doctor: the configuration cannot be read: {broken}. Fix it: no client can be "
              "made until then", file=sys.stderr)  # fmt: skip
        return 1
    return 0


COMMANDS["list"] = Command("list the installed backends and their status", _list_arguments, _list_run)
COMMANDS["doctor"] = Command("report versions, config, plugins and devices", _doctor_arguments, _doctor_run)
COMMANDS["bench"] = LazyCommand("cubeplug.commands.bench", "benchmark backends against their raw libraries")
COMMANDS["cache"] = LazyCommand("cubeplug.commands.cache", "show or clear the autotune cache")
COMMANDS["conformance"] = LazyCommand("cubeplug.commands.conformance", "run the backend conformance suite")


# ---------------------------------------------------------------------------------------- main
def _chosen(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argument parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="cubeplug", description="cubeplug: GPU compute with plugin backends"
    )
    parser.add_argument("--version", action="version", version=f"cubeplug {cubeplug.__version__}")
    parser.add_argument("--plain", action="store_true", help="plain text output, even when rich is installed")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv)
    for name, cmd in COMMANDS.items():
        if isinstance(cmd, LazyCommand) and name == chosen:
            cmd = cmd.resolve()
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        p.add_argument("--plain", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if isinstance(cmd, Command):
            cmd.add_arguments(p)
            p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``cubeplug`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 0 if args.command is None else 2

    try:
        return int(run(args))
    except CubeplugError as exc:
        print(f"cubeplug {args.command}: error: {exc}", file=sys.stderr)
        return 1
