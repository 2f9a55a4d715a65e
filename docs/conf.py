"""Sphinx configuration of the cubeplug documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` and, to run every code
example, ``sphinx-build -W --keep-going -b doctest docs docs/_build/doctest``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

import cubeplug  # noqa: E402

project = "cubeplug"
author = "the cubeplug authors"
copyright = "the cubeplug authors, MIT OR Apache-2.0"
release = version = cubeplug.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "cubeplug_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# MyST: heading anchors so that ``[Tensors](#tensors)`` links resolve; ``{directive}`` fences.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# autodoc: signatures keep the annotations as written; members in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# doctest: every example runs on the CPU backend; other backends only where they are usable here.
doctest_global_setup = """
import numpy as np
import cubeplug
from cubeplug_docs import backend_usable
"""
doctest_test_doctest_blocks = ""  # only the explicit testcode / doctest blocks

html_theme = "alabaster"
html_title = f"cubeplug {release}"
html_static_path: list[str] = []
