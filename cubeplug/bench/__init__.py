"""``cubeplug bench``: cubeplug's figures beside the raw libraries' (see :mod:`.command`).

The command's entry points for the CLI registry are :func:`add_arguments` and :func:`run`.
GPU libraries are imported only while their backend is measured.
"""

from __future__ import annotations

from cubeplug.bench.command import SECTIONS, add_arguments, run

__all__ = ["SECTIONS", "add_arguments", "run"]
