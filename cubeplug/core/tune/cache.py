"""Where tuning results live: in memory per tuner, and on disk in one SQLite file shared by processes.

The file is ``autotune.sqlite3`` in ``CUBEPLUG_CACHE_DIR`` when that variable is set (and not empty),
else in ``platformdirs.user_cache_dir("cubeplug")``. Rows are keyed by a :class:`Namespace`
(cubeplug version, device, tuner name) and the key's text; each holds the checksum of the tuner's
candidate names, so a result recorded for another set of candidates is ignored and tuned again.
A cache that cannot be opened, read or written never fails an operation: the process goes on with
its in-memory results and says so in one :class:`TuneCacheWarning` per file.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cubeplug.core.paths import ENV_CACHE_DIR, cache_dir

log = logging.getLogger("cubeplug.tune")

#: The SQLite file of tuning results inside the cache directory.
DB_NAME = "autotune.sqlite3"
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS autotune (
    version  TEXT NOT NULL,
    device   TEXT NOT NULL,
    tuner    TEXT NOT NULL,
    key      TEXT NOT NULL,
    checksum TEXT NOT NULL,
    fastest  TEXT NOT NULL,
    outcomes TEXT NOT NULL,
    created  REAL NOT NULL,
    PRIMARY KEY (version, device, tuner, key)
)
"""


class TuneCacheWarning(UserWarning):
    """The persistent autotune cache is unusable; results stay in memory for this process."""


def default_db_path() -> Path:
    """The SQLite file of tuning results."""
    return cache_dir() / DB_NAME


@dataclass(frozen=True)
class Namespace:
    """Whose results these are: the cubeplug version (with a digest of its sources,
    :func:`~cubeplug.core.version.code_version`), the device and the tuner's name."""

    version: str
    device: str
    tuner: str

    def __str__(self) -> str:
        return f"{self.version}/{self.device}/{self.tuner}"


@dataclass(frozen=True)
class CacheEntry:
    """A tuning result: the fastest candidate's name, the candidates' checksum and what was measured."""

    fastest: str
    checksum: str
    outcomes: tuple[dict[str, Any], ...] = ()
    created: float = field(default_factory=time.time)


class PersistentCache:
    """Tuning results in one SQLite file; any failure degrades to memory with one warning per file.

    ``state`` is ``"closed"`` until first use, then ``"ok"``, ``"readonly"`` (results are read but
    not written) or ``"off"`` (the file is unusable: nothing is read or written).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.state = "closed"
        self.reason = ""
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._warned = False

    # ------------------------------------------------------------------ state
    def _degrade(self, state: str, what: str, exc: BaseException) -> None:
        self.state = state
        self.reason = f"{what}: {type(exc).__name__}: {exc}"
        if state == "off" and self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None
        if self._warned:
            return
        self._warned = True
        remedy = (
            "run `cubeplug cache clear` to start a fresh file"
            if "corrupt" in what
            else f"set {ENV_CACHE_DIR} to a writable directory"
        )
        mode = "read but not updated" if state == "readonly" else "ignored"
        message = (
            f"the autotune cache {self.path} is {mode} ({self.reason}); tuning results are kept in "
            f"memory for this process only; {remedy}"
        )
        log.warning(message)
        warnings.warn(message, TuneCacheWarning, stacklevel=4)

    def _open(self) -> sqlite3.Connection | None:
        """The connection, opening (and creating) the file on first use; None when unusable."""
        if self._conn is not None or self.state == "off":
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = _connect(self.path, readonly=False)
            try:
                _prepare(conn)
            except BaseException:
                conn.close()
                raise
            self._conn, self.state = conn, "ok"
            return conn
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                return self._open_readonly(exc)
            self._degrade("off", "the file is corrupt (not an SQLite database of cubeplug)", exc)
        except OSError as exc:
            return self._open_readonly(exc)
        return None

    def _open_readonly(self, first: BaseException) -> sqlite3.Connection | None:
        if not self.path.is_file():
            self._degrade("off", "cannot create it", first)
            return None
        try:
            conn = _connect(self.path, readonly=True)
            conn.execute("SELECT count(*) FROM autotune").fetchone()
        except (sqlite3.Error, OSError) as exc:
            self._degrade("off", "cannot open it" if not _is_corrupt(exc) else "the file is corrupt", exc)
            return None
        self._conn = conn
        self._degrade("readonly", "cannot write to it", first)
        return conn

    # ------------------------------------------------------------------ results
    def load(self, ns: Namespace, key: str) -> CacheEntry | None:
        """The stored result of ``key``, or None (absent, or the cache is unusable)."""
        with self._lock:
            conn = self._open()
            if conn is None:
                return None
            try:
                row = conn.execute(
                    "SELECT fastest, checksum, outcomes, created FROM autotune "
                    "WHERE version=? AND device=? AND tuner=? AND key=?",
                    (ns.version, ns.device, ns.tuner, key),
                ).fetchone()
            except sqlite3.Error as exc:
                self._degrade("off", "cannot read it" if not _is_corrupt(exc) else "the file is corrupt", exc)
                return None
        if row is None:
            return None
        try:
            outcomes = tuple(json.loads(row[2]))
        except (TypeError, ValueError):
            outcomes = ()
        return CacheEntry(str(row[0]), str(row[1]), outcomes, float(row[3]))

    def store(self, ns: Namespace, key: str, entry: CacheEntry) -> bool:
        """Record ``entry`` for ``key``; False when the cache cannot be written."""
        with self._lock:
            conn = self._open()
            if conn is None or self.state != "ok":
                return False
            try:
                with conn:
                    conn.execute(
                        "INSERT OR REPLACE INTO autotune VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            ns.version, ns.device, ns.tuner, key, entry.checksum, entry.fastest,
                            json.dumps(list(entry.outcomes)), entry.created,
                        ),
                    )  # fmt: skip
            except sqlite3.Error as exc:
                if _is_corrupt(exc):
                    self._degrade("off", "the file is corrupt", exc)
                else:
                    self._degrade("readonly", "cannot write to it", exc)
                return False
        return True

    def delete(self, ns: Namespace, key: str) -> None:
        """Forget the result of ``key`` (a stale checksum); silently nothing when read-only."""
        with self._lock:
            conn = self._open()
            if conn is None or self.state != "ok":
                return
            try:
                with conn:
                    conn.execute(
                        "DELETE FROM autotune WHERE version=? AND device=? AND tuner=? AND key=?",
                        (ns.version, ns.device, ns.tuner, key),
                    )
            except sqlite3.Error as exc:
                self._degrade("readonly", "cannot write to it", exc)

    # ------------------------------------------------------------------ inspection
    def summary(self) -> list[dict[str, Any]]:
        """One row per namespace: version, device, tuner and how many results it holds."""
        with self._lock:
            conn = self._open()
            if conn is None:
                return []
            try:
                rows = conn.execute(
                    "SELECT version, device, tuner, count(*), max(created) FROM autotune "
                    "GROUP BY version, device, tuner ORDER BY version, device, tuner"
                ).fetchall()
            except sqlite3.Error as exc:
                self._degrade("off", "cannot read it" if not _is_corrupt(exc) else "the file is corrupt", exc)
                return []
        return [
            {"version": v, "device": d, "tuner": t, "entries": int(c), "latest": float(latest or 0.0)}
            for v, d, t, c, latest in rows
        ]

    def entries(self, tuner: str | None = None) -> list[dict[str, Any]]:
        """Every stored result (optionally of one tuner): namespace, key, fastest, checksum."""
        with self._lock:
            conn = self._open()
            if conn is None:
                return []
            sql = "SELECT version, device, tuner, key, fastest, checksum, created FROM autotune"
            args: tuple[Any, ...] = ()
            if tuner is not None:
                sql += " WHERE tuner=?"
                args = (tuner,)
            try:
                rows = conn.execute(sql + " ORDER BY tuner, key", args).fetchall()
            except sqlite3.Error as exc:
                self._degrade("off", "cannot read it", exc)
                return []
        names = ("version", "device", "tuner", "key", "fastest", "checksum", "created")
        return [dict(zip(names, row)) for row in rows]

    def clear(self, tuner: str | None = None, device: str | None = None) -> int:
        """Delete stored results (all, or of one tuner and/or device); returns how many went."""
        with self._lock:
            conn = self._open()
            if conn is None or self.state != "ok":
                return 0
            where, args = [], []
            if tuner is not None:
                where.append("tuner=?")
                args.append(tuner)
            if device is not None:
                where.append("device=?")
                args.append(device)
            sql = "DELETE FROM autotune" + (" WHERE " + " AND ".join(where) if where else "")
            try:
                with conn:
                    return int(conn.execute(sql, args).rowcount)
            except sqlite3.Error as exc:
                self._degrade("readonly", "cannot write to it", exc)
                return 0

    def close(self) -> None:
        """Close the connection (the next use opens it again)."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:
                    pass
                self._conn = None
            if self.state in ("ok", "readonly"):
                self.state = "closed"


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    """An autocommit connection usable from any thread (callers hold the cache's lock)."""
    if readonly:
        return sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10.0, check_same_thread=False,
            isolation_level=None,
        )  # fmt: skip
    return sqlite3.connect(str(path), timeout=10.0, check_same_thread=False, isolation_level=None)


def _prepare(conn: sqlite3.Connection) -> None:
    """Check the file is ours (or empty) and create the table."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version not in (0, _SCHEMA_VERSION):
        raise sqlite3.DatabaseError(f"file is not a database of this cubeplug (schema {version})")
    conn.execute(_SCHEMA)
    if version == 0:
        conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
    conn.execute("SELECT count(*) FROM autotune").fetchone()


def _is_corrupt(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and (
        "not a database" in text or "malformed" in text or "schema" in text or "corrupt" in text
    )


# ---------------------------------------------------------------------------------------- per process
_persistent: dict[Path, PersistentCache] = {}
_persistent_lock = threading.Lock()


def persistent_cache(path: str | os.PathLike[str] | None = None) -> PersistentCache:
    """The process-wide cache object of a file (default: :func:`default_db_path`), one per path."""
    resolved = Path(path) if path is not None else default_db_path()
    with _persistent_lock:
        cache = _persistent.get(resolved)
        if cache is None:
            cache = _persistent[resolved] = PersistentCache(resolved)
        return cache


def reset_persistent_caches() -> None:
    """Close and forget every cache object of this process (for tests and ``cubeplug cache clear``)."""
    with _persistent_lock:
        for cache in _persistent.values():
            cache.close()
        _persistent.clear()


class TuneCache:
    """One tuner's results: a dict in memory in front of the persistent cache (if any)."""

    def __init__(self, namespace: Namespace, persistent: PersistentCache | None = None) -> None:
        self.namespace = namespace
        self.persistent = persistent
        #: key -> name of the fastest candidate; read without a lock on the hot path.
        self.memory: dict[Any, str] = {}

    def fastest(self, key: Any) -> str | None:
        """The in-memory choice for ``key`` (None when it was not tuned in this process yet)."""
        return self.memory.get(key)

    def lookup(self, key: Any, text: str, checksum: str) -> CacheEntry | None:
        """The persisted result of ``key`` if its checksum matches; a stale one is deleted."""
        if self.persistent is None:
            return None
        entry = self.persistent.load(self.namespace, text)
        if entry is None:
            return None
        if entry.checksum != checksum:
            log.info(
                "autotune %s %s: stored result is for other candidates; tuning again", self.namespace, text
            )
            self.persistent.delete(self.namespace, text)
            return None
        self.memory[key] = entry.fastest
        return entry

    def insert(self, key: Any, text: str, entry: CacheEntry) -> None:
        """Record a fresh result in memory and, when there is one, in the persistent cache."""
        self.memory[key] = entry.fastest
        if self.persistent is not None:
            self.persistent.store(self.namespace, text, entry)
