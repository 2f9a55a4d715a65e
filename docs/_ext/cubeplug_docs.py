"""Sphinx extension of the cubeplug docs: tables and help texts generated from the code itself.

Directives (usable from Markdown as ```` ```{cubeplug-config-table} ````):

``cubeplug-config-table``
    Every key of :data:`cubeplug.registry.settings.SCHEMA`: its ``[section] key``, its environment
    variable, its default (from the config dataclasses) and its allowed values.
``cubeplug-backend-options``
    The ``[backends.<name>]`` option keys each built-in backend accepts.
``cubeplug-autotune-bench``
    The ``[autotune.bench]`` keys with their default at every autotune level.
``cubeplug-c-prelude``
    The macros and typedefs of the ``c`` dialect's prelude, for CUDA and OpenCL, from the prelude itself.
``cubeplug-cli``
    The ``--help`` text of ``cubeplug`` and of each subcommand, from :func:`cubeplug.cli.build_parser`.

It also gives the doctest builder :func:`backend_usable`.
"""

from __future__ import annotations

import functools
import io
import os
import re
from contextlib import redirect_stdout
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------- helpers
@functools.cache
def backend_usable(name: str) -> bool:
    """True when backend ``name`` is installed and its probe succeeds here (doctest ``:skipif:``)."""
    try:
        from cubeplug.registry.plugins import registry

        return bool(registry().probe(name).ok)
    except Exception:
        return False


def _cell(content: Any) -> nodes.entry:
    """A table cell: a string, or a list of strings and ``("code", text)`` pairs."""
    entry = nodes.entry()
    para = nodes.paragraph()
    parts = content if isinstance(content, list) else [content]
    for part in parts:
        if isinstance(part, tuple):
            para += nodes.literal(part[1], part[1])
        else:
            para += nodes.Text(str(part))
    entry += para
    return entry


def _table(headers: list[str], rows: list[list[Any]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["cubeplug-generated"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for w in widths:
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    row = nodes.row()
    for h in headers:
        row += _cell(h)
    head += row
    group += head
    body = nodes.tbody()
    for r in rows:
        row = nodes.row()
        for c in r:
            row += _cell(c)
        body += row
    group += body
    return table


def _spelling(table: dict[str, str], name: str) -> Any:
    """A prelude table cell: the API's spelling of ``name``, or a dash where it has none."""
    return [("code", table[name])] if name in table else "-"


def _toml(value: Any) -> str:
    """A default value as it would be written in ``cubeplug.toml``."""
    if value is None:
        return '"none" (unset)'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{} (empty table)" if not value else str(value)
    return str(value)


# ---------------------------------------------------------------------------------------- directives
class ConfigTable(SphinxDirective):
    """Every config key from the code's own registry (``SCHEMA``) with its defaults from ``Config``."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from cubeplug.registry import settings as cfg

        defaults = cfg.Config()
        tables = getattr(cfg, "_TABLES", set())
        rows: list[list[Any]] = []
        for section, keys in cfg.SCHEMA.items():
            for key, spec in keys.items():
                dotted = f"{section}.{key}"
                default = getattr(getattr(defaults, section), key)
                if dotted in tables:
                    default = None
                    name = [("code", f"[{section}.{key}]"), " ", ("code", "NAME = value")]
                    env = f"CUBEPLUG_{section.upper()}_{key.upper()}_<NAME>"
                else:
                    name = [("code", f"[{section}] {key}")]
                    env = f"CUBEPLUG_{section.upper()}_{key.upper()}"
                shown = [("code", _toml(default))] if dotted not in tables else "the level's (below)"
                rows.append([name, [("code", env)], shown, spec.allowed])
        rows.append(
            [
                [("code", "[backends.<name>] <key>")],
                [("code", "CUBEPLUG_BACKENDS_<NAME>_<KEY>")],
                "(per backend)",
                "the options of that backend (see below)",
            ]
        )
        return [_table(["key", "environment variable", "default", "allowed values"], rows, [22, 30, 16, 32])]


class BackendOptions(SphinxDirective):
    """The option keys of ``[backends.<name>]`` that each built-in backend accepts."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        sources = {
            "cuda": ("cubeplug.backends.cuda.options", "_PARSERS"),
            "opencl": ("cubeplug.backends.opencl.options", "OPTIONS"),
            "webgpu": ("cubeplug.backends.webgpu.plugin", "_OPTIONS"),
            "cpu": ("cubeplug.backends.cpu.plugin", "OPTIONS"),
        }
        rows: list[list[Any]] = []
        import importlib

        for backend, (module, attr) in sources.items():
            try:
                keys = list(getattr(importlib.import_module(module), attr))
            except Exception as exc:  # the docs build fails (-W) and says where to look
                logger.warning(
                    "cubeplug-backend-options: cannot read %s.%s (%s); update docs/_ext/cubeplug_docs.py",
                    module, attr, exc, location=self.get_location(),
                )  # fmt: skip
                continue
            cells: list[Any] = []
            for i, key in enumerate(keys):
                if i:
                    cells.append(", ")
                cells.append(("code", key))
            rows.append([[("code", f"[backends.{backend}]")], cells])
        return [_table(["section", "keys"], rows, [25, 75])]


class AutotuneBench(SphinxDirective):
    """The ``[autotune.bench]`` keys, their allowed values and their default at every autotune level."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from cubeplug.core.tune import settings

        levels = settings.LEVEL_SETTINGS
        rows: list[list[Any]] = []
        for key, allowed in settings._ALLOWED.items():
            row: list[Any] = [[("code", key)], [("code", f"CUBEPLUG_AUTOTUNE_BENCH_{key.upper()}")], allowed]
            row += [[("code", _toml(getattr(levels[level], key)))] for level in levels]
            rows.append(row)
        headers = ["key", "environment variable", "allowed values", *(f"{lv}" for lv in levels)]
        return [_table(headers, rows, [14, 30, 24, *([8] * len(levels))])]


class CPrelude(SphinxDirective):
    """The macros and typedefs of the ``c`` dialect's prelude, side by side for CUDA and OpenCL."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from cubeplug.core import cdialect

        define = re.compile(r"^#define\s+(\w+(?:\([^)]*\))?)(?:\s+(.*))?$")
        typedef = re.compile(r"^typedef\s+(.+?)\s+(\w+);$")
        apis: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
        for api in ("cuda", "opencl"):
            macros: dict[str, str] = {}
            types: dict[str, str] = {}
            for line in cdialect.prelude(api, fp16=True, fp64=True).splitlines():
                if m := define.match(line.strip()):
                    macros[m.group(1)] = m.group(2) or "(nothing)"
                elif m := typedef.match(line.strip()):
                    types[m.group(2)] = m.group(1)
            apis[api] = (macros, types)
        out: list[nodes.Node] = []
        for index, title in ((0, "macro"), (1, "type")):
            names = list(dict.fromkeys([*apis["cuda"][index], *apis["opencl"][index]]))
            rows = [
                [[("code", n)], *(_spelling(apis[a][index], n) for a in apis)]
                for n in names
            ]
            out.append(_table([title, "CUDA", "OpenCL"], rows, [26, 37, 37]))
        return out


class CliHelp(SphinxDirective):
    """``cubeplug --help`` and ``cubeplug COMMAND --help``, as the installed command prints them."""

    has_content = False
    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from cubeplug import cli

        commands = [self.arguments[0]] if self.arguments else [None, *cli.COMMANDS]
        out: list[nodes.Node] = []
        old = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: fix it for a stable page
        try:
            for name in commands:
                argv = [] if name is None else [name]
                parser = cli.build_parser(argv)
                if name is not None:
                    parser = parser._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
                buf = io.StringIO()
                with redirect_stdout(buf):
                    parser.print_help()
                title = "cubeplug --help" if name is None else f"cubeplug {name} --help"
                text = f"$ {title}\n{buf.getvalue().rstrip()}"
                block = nodes.literal_block(text, text, language="text")
                out.append(block)
        finally:
            if old is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = old
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cubeplug-config-table", ConfigTable)
    app.add_directive("cubeplug-backend-options", BackendOptions)
    app.add_directive("cubeplug-autotune-bench", AutotuneBench)
    app.add_directive("cubeplug-c-prelude", CPrelude)
    app.add_directive("cubeplug-cli", CliHelp)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
