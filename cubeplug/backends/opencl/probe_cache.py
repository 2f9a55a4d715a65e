"""The device probe's outcomes on disk, so that a process need not build the probe kernel again.

Building the probe kernel costs 40-60 ms per device even with a warm PoCL kernel cache (PoCL 3.1 and
3.0 on a 2-core machine; ``python bench/probes/opencl_device_probe.py``), so a process that opens
one client on a machine with two PoCL installs would pay about 120 ms. A build's outcome depends on
the compiler and the processor only, so it is kept in ``opencl-probes.json`` in the cache directory
(``CUBEPLUG_CACHE_DIR`` or the user cache directory), keyed by the probe source, the platform and
its version, the device and its driver version, and the host processor (the pip PoCL fails on some
processors and not on others that share a name). Only builds are kept, not a context that failed to
open (which may be passing). A cache that cannot be read or written is ignored: the probe builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

from cubeplug.plugin import cache_dir

FILE = "opencl-probes.json"
#: The lines of /proc/cpuinfo that tell processors apart for a compiler (LLVM's host CPU detection).
_CPU_KEYS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "isa", "uarch")

_lock = threading.Lock()


@cache
def host_fingerprint() -> str:
    """The host processor as a compiler sees it: the first processor's identity and feature flags."""
    fields = [platform.machine(), platform.processor()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                name, _, value = line.partition(":")
                if name.strip() in _CPU_KEYS:
                    fields.append(f"{name.strip()}={value.strip()}")
    except OSError:
        pass
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()[:16]


def key(device: Any, source: str) -> str:
    """The cache key of building ``source`` on ``device`` on this host."""
    plat = device.platform
    parts = [
        source,
        str(plat.name),
        str(plat.version),
        str(device.name),
        str(device.version),
        str(device.driver_version),
        host_fingerprint(),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def path() -> Path:
    """The file of probe outcomes."""
    return cache_dir() / FILE


def _read(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(device: Any, source: str) -> tuple[bool, str | None]:
    """(found, error): error is None for a device that built the probe."""
    entry = _read(path()).get(key(device, source))
    if not isinstance(entry, dict) or "error" not in entry:
        return False, None
    error = entry["error"]
    return True, error if isinstance(error, str) else None


def store(device: Any, source: str, error: str | None) -> None:
    """Keep the outcome of building ``source`` on ``device`` (atomically; errors ignored)."""
    file = path()
    with _lock:
        data = _read(file)
        data[key(device, source)] = {"error": error, "device": str(device.name).strip(),
                                     "driver": str(device.driver_version).strip()}  # fmt: skip
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".opencl-probes-")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, file)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
