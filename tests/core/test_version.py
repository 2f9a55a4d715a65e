"""The tune cache's version: __version__ and a digest of the package's sources."""

from __future__ import annotations

from pathlib import Path

from cubeplug.core.tune.tuner import Tuner
from cubeplug.core.version import PACKAGE_ROOT, __version__, code_version, source_digest


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_digest_follows_every_source_file(tmp_path: Path) -> None:
    files = {"a.py": "x = 1\n", "sub/b.py": "y = 2\n", "notes.txt": "not a source"}
    base = source_digest(_tree(tmp_path / "one", files))
    assert source_digest(_tree(tmp_path / "same", files)) == base  # the place does not count
    assert source_digest(_tree(tmp_path / "edit", {**files, "sub/b.py": "y = 3\n"})) != base
    assert source_digest(_tree(tmp_path / "added", {**files, "c.py": ""})) != base
    assert source_digest(_tree(tmp_path / "moved", {"a.py": "x = 1\n", "b.py": "y = 2\n"})) != base
    assert source_digest(_tree(tmp_path / "text", {**files, "notes.txt": "other"})) == base


def test_the_tune_cache_keys_on_the_code() -> None:
    assert code_version() == f"{__version__}+{source_digest(PACKAGE_ROOT)}"
    assert code_version() is code_version()  # digested once a process
    assert Tuner("test.version", "fake:device").cache.namespace.version == code_version()
