"""cubeplug's version, in the runtime core so that the tune cache (which keys on it) and the registry
need not import the package face; ``cubeplug.__version__`` re-exports it. Keep it equal to
``[project] version`` in pyproject.toml (tests/test_import.py checks)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"

#: The package's root (``cubeplug/``), whose sources :func:`code_version` digests.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def source_digest(root: Path) -> str:
    """A digest of every ``.py`` file under ``root``, their paths and contents (12 hex digits)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


@functools.cache
def code_version() -> str:
    """``__version__`` and a digest of the package's Python sources: the tune cache's version.

    Why: a tuning result names the fastest candidate, and a candidate keeps its name when its code
    changes (a kernel rewritten, a code generator improved), so a result measured with other code (a
    development tree edited since, another build of the same version) must not be reused. Triton
    keys its caches on a hash of its own sources for the same reason. Digested once a process, at
    the first tuning, not at import (16 ms here for 211 files); where the sources cannot be
    read (a zipped install), the version alone."""
    try:
        return f"{__version__}+{source_digest(PACKAGE_ROOT)}"
    except OSError:
        return __version__
