"""Where cubeplug keeps files between processes: one cache directory for the autotune results and
the OpenCL device probe's outcomes. Importing this module is cheap (no SQLite, no tuner)."""

from __future__ import annotations

import os
from pathlib import Path

#: The variable that moves the cache directory (tests, CI, read-only homes).
ENV_CACHE_DIR = "CUBEPLUG_CACHE_DIR"


def cache_dir() -> Path:
    """The cache directory: ``$CUBEPLUG_CACHE_DIR`` or ``platformdirs.user_cache_dir("cubeplug")``."""
    override = os.environ.get(ENV_CACHE_DIR, "").strip()
    if override:
        return Path(override).expanduser()
    import platformdirs  # only when no override names the directory

    return Path(platformdirs.user_cache_dir("cubeplug"))
