"""cubeplug's version, in the runtime core so that the tune cache (which keys on it) and the registry
need not import the package face; ``cubeplug.__version__`` re-exports it. Keep it equal to
``[project] version`` in pyproject.toml (tests/test_import.py checks)."""

__version__ = "0.1.0"
