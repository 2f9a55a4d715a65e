"""``cubeplug cache info|clear``: where the autotune cache is, what it holds, and deleting it.

``info`` (the default) prints the SQLite file's path, size and state, and one row per namespace
(cubeplug version, device, tuner) with its number of results; ``--entries`` lists every result and
``--json`` prints one JSON document. ``clear`` deletes every result, or only those of ``--tuner``
and/or ``--device``; a corrupt file is deleted whole.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import warnings
from pathlib import Path
from typing import Any

from cubeplug.commands.output import Output, redact
from cubeplug.core.paths import ENV_CACHE_DIR
from cubeplug.core.tune.cache import (
    PersistentCache,
    TuneCacheWarning,
    default_db_path,
    reset_persistent_caches,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``cache`` subcommand's arguments."""
    sub = parser.add_subparsers(dest="cache_action", metavar="ACTION")
    info = sub.add_parser("info", help="where the autotune cache is and what it holds (the default)")
    info.add_argument("--json", action="store_true", help="print one JSON document")
    info.add_argument("--entries", action="store_true", help="list every stored result")
    info.add_argument("--plain", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    clear = sub.add_parser("clear", help="delete stored autotune results")
    clear.add_argument("--tuner", metavar="NAME", help="only the results of this tuner (e.g. std.matmul)")
    clear.add_argument(
        "--device", metavar="DEVICE", help="only the results of this device (as info shows it)"
    )
    clear.add_argument("--plain", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _open(path: Path) -> tuple[PersistentCache, list[str]]:
    """A private cache object for the file, and the warnings opening it raised (as text)."""
    cache = PersistentCache(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TuneCacheWarning)
        cache.summary()
    return cache, [str(w.message) for w in caught]


def cache_info(entries: bool = False) -> dict[str, Any]:
    """Everything ``cubeplug cache info`` reports, as a JSON-friendly mapping."""
    from cubeplug.registry.settings import effective_config

    path = default_db_path()
    out: dict[str, Any] = {
        "path": str(path),
        "directory from": f"env {ENV_CACHE_DIR}"
        if os.environ.get(ENV_CACHE_DIR, "").strip()
        else "platformdirs",
        "exists": path.is_file(),
    }
    try:
        cfg = effective_config()
        out["config"] = {
            "autotune.level": f"{cfg.config.autotune.level} ({cfg.origin('autotune.level')})",
            "autotune.cache": f"{cfg.config.autotune.cache} ({cfg.origin('autotune.cache')})",
        }
    except Exception as exc:  # a broken config file must not hide the cache
        out["config"] = {"error": str(exc)}
    if not path.is_file():
        out["namespaces"] = []
        return out
    out["bytes"] = path.stat().st_size
    cache, problems = _open(path)
    try:
        out["state"] = cache.state
        if problems:
            out["problem"] = problems[0]
        out["namespaces"] = [{**row, "latest": _date(row["latest"])} for row in cache.summary()]
        if entries:
            out["entries"] = [{**row, "created": _date(row["created"])} for row in cache.entries()]
    finally:
        cache.close()
    return out


def cache_clear(tuner: str | None = None, device: str | None = None) -> str:
    """Delete stored results (a corrupt file whole); returns what was done, in one sentence."""
    path = default_db_path()
    reset_persistent_caches()
    if not path.is_file():
        return f"nothing to clear: {path} does not exist"
    cache, problems = _open(path)
    try:
        if cache.state == "off":
            if tuner is not None or device is not None:
                return f"{path} is unusable ({cache.reason}); run `cubeplug cache clear` with no filter"
            cache.close()
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(str(path) + suffix).unlink(missing_ok=True)
            return f"deleted the unusable cache file {path} ({cache.reason})"
        if cache.state == "readonly":
            return f"cannot clear {path}: {problems[0] if problems else cache.reason}"
        removed = cache.clear(tuner=tuner, device=device)
    finally:
        cache.close()
    scope = (
        " and ".join(f"{k} {v!r}" for k, v in (("tuner", tuner), ("device", device)) if v) or "every tuner"
    )
    return f"deleted {removed} autotune result{'s' if removed != 1 else ''} of {scope} from {path}"


def _date(stamp: float) -> str:
    if not stamp:
        return ""
    return datetime.datetime.fromtimestamp(stamp).isoformat(timespec="seconds")


def run(args: argparse.Namespace) -> int:
    """Run ``cubeplug cache``."""
    action = getattr(args, "cache_action", None) or "info"
    plain = bool(getattr(args, "plain", False))
    if action == "clear":
        print(redact(cache_clear(args.tuner, args.device)))
        return 0
    report = redact(cache_info(entries=bool(getattr(args, "entries", False))))
    if getattr(args, "json", False):
        print(json.dumps(report, indent=2))
        return 0
    out = Output(plain)
    out.section("autotune cache", {k: v for k, v in report.items() if k not in ("namespaces", "entries")})
    rows = [[r["version"], r["device"], r["tuner"], r["entries"], r["latest"]] for r in report["namespaces"]]
    out.table("results by namespace", ["version", "device", "tuner", "results", "latest"], rows)
    if "entries" in report:
        out.table(
            "results",
            ["tuner", "device", "key", "fastest", "created"],
            [[e["tuner"], e["device"], e["key"], e["fastest"], e["created"]] for e in report["entries"]],
        )
    return 0
