"""A progress bar on stderr while tuning, shown only when stderr is a terminal (rich when importable)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Progress(Protocol):
    """What the tuner calls while it measures."""

    def advance(self, steps: int = 1, note: str = "") -> None:
        """Record ``steps`` more benchmark steps done, with an optional note (the candidate)."""


class _Silent:
    def advance(self, steps: int = 1, note: str = "") -> None:
        pass


class _Plain:
    """A one-line ``\\r`` counter for terminals without rich."""

    def __init__(self, title: str, total: int) -> None:
        self.title, self.total, self.done = title, max(total, 1), 0

    def advance(self, steps: int = 1, note: str = "") -> None:
        self.done = min(self.total, self.done + steps)
        pct = 100 * self.done // self.total
        sys.stderr.write(f"\r{self.title}: {pct:3d}% {note[:40]:<40}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r" + " " * (len(self.title) + 48) + "\r")
        sys.stderr.flush()


class _Rich:
    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task

    def advance(self, steps: int = 1, note: str = "") -> None:
        self.bar.update(self.task, advance=steps, note=note)


def is_terminal() -> bool:
    """True when stderr is an interactive terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress_bar(title: str, total: int, enabled: bool = True) -> Iterator[Progress]:
    """A progress bar of ``total`` steps on stderr; silent unless enabled and stderr is a terminal."""
    if not enabled or not is_terminal():
        yield _Silent()
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        plain = _Plain(title, total)
        try:
            yield plain
        finally:
            plain.close()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(title, total=max(total, 1), note="")
        yield _Rich(bar, task)
