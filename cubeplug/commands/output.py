"""What the commands print: tables and sections (rich when importable), JSON-friendly copies, and the
home directory shown as ``~``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def redact(value: Any) -> Any:
    """The value with the home directory shown as ``~`` in every string it holds."""
    home = str(Path.home())
    if isinstance(value, str):
        return value.replace(home, "~") if home not in ("", "/") else value
    if isinstance(value, Mapping):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    """A JSON-friendly copy of dataclasses, sets, tuples, paths and mappings (anything else as its repr)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    return repr(value)


class Output:
    """Tables and key-value sections, with rich when it is importable (and wanted), plain text otherwise."""

    def __init__(self, plain: bool = False) -> None:
        self.console: Any = None
        if not plain:
            try:
                from rich.console import Console

                self.console = Console(highlight=False)
            except ImportError:
                pass

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Print a table."""
        cells = [[_cell(c) for c in row] for row in rows]
        if self.console is not None:
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for col in columns:
                table.add_column(col, overflow="fold")
            for row in cells:
                table.add_row(*(_markup_escape(c) for c in row))
            self.console.print(table)
            return
        widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
        print(f"{title}")
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
        print("  ".join("-" * w for w in widths))
        for row in cells:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        print()

    def section(self, title: str, data: Any) -> None:
        """Print a titled mapping (nested values indented) or a single value."""
        if self.console is not None:
            self.console.rule(_markup_escape(title), align="left")
            self.console.print(_markup_escape(_render(data)), soft_wrap=True)
        else:
            print(f"== {title} ==")
            print(_render(data))
        print()


def _markup_escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _render(data: Any, indent: int = 0) -> str:
    pad = "  " * indent
    if isinstance(data, Mapping):
        lines = []
        for key, value in data.items():
            if isinstance(value, Mapping) and value:
                lines.append(f"{pad}{key}:")
                lines.append(_render(value, indent + 1))
            else:
                lines.append(f"{pad}{key}: {_cell(value) if not isinstance(value, Mapping) else '{}'}")
        return "\n".join(lines)
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        return "\n".join(
            _render(item, indent) + ("\n" if i < len(data) - 1 else "") for i, item in enumerate(data)
        )
    return f"{pad}{_cell(data)}"
