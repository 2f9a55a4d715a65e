"""Dummy distributions with real entry points: dist-info (METADATA, entry_points.txt) plus a module.

:func:`install` writes them into a directory that tests put on ``sys.path`` (or ``PYTHONPATH``), so
``importlib.metadata`` finds them exactly as it finds installed packages.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

HEADER = "from cubeplug.plugin import BackendSpec, Probe, hookimpl\n"


def _spec(name: str, priority: int = 10, api: str = "", kind: str = "gpu") -> str:
    return (
        f"BackendSpec(name={name!r}, description='dummy {name}', dialects=('python',), probe=probe, "
        f"priority={priority}, kind={kind!r}, install_hint='pip install cubeplug-{name}'{api})"
    )


_PROBE = """
def probe():
    import os
    if os.environ.get("DUMMY_UNAVAILABLE"):
        return Probe.unavailable("no dummy device here")
    return Probe(True, "dummy device", ("dummy0",))
"""

_FACTORIES = """
@hookimpl
def cubeplug_compute_storage(backend, device, config):
    from cubeplug.backends.cpu.storage import CpuStorage
    return CpuStorage()

@hookimpl
def cubeplug_compute_server(backend, device, config, storage, streams):
    from cubeplug.backends.cpu.server import CpuServer
    server = CpuServer(storage, config, device)
    server.backend = NAME
    return server
"""

GOOD = (
    HEADER
    + "NAME = 'dummygood'\nEVENTS = []\n"
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummygood", priority=50)}]
"""
    + _FACTORIES
    + """
@hookimpl
def cubeplug_configure(config):
    EVENTS.append(("configure", config))

@hookimpl
def cubeplug_diagnostics(backend):
    return {"dummy section": {"asked about": backend}}

@hookimpl
def cubeplug_kernel_compiled(backend, kernel, dialect, seconds):
    EVENTS.append(("compiled", backend, kernel))
"""
)

BROKEN = "raise ImportError('simulated missing dependency of dummybroken')\n"

SPECS_RAISE = (
    HEADER
    + """
@hookimpl
def cubeplug_backends():
    raise RuntimeError('boom in cubeplug_backends')
"""
)

HOOK_RAISE = (
    HEADER
    + "NAME = 'dummyraise'\n"
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummyraise")}]

@hookimpl
def cubeplug_compute_storage(backend, device, config):
    raise RuntimeError('boom in cubeplug_compute_storage')
"""
)

WRONG_TYPE = (
    HEADER
    + "NAME = 'dummywrong'\n"
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummywrong")}]

@hookimpl
def cubeplug_compute_storage(backend, device, config):
    return 'not a storage'
"""
)

OLD_API = (
    HEADER
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummyold", api=", api_version=0")}]
"""
)

SLOW = (
    "import time\ntime.sleep(3.0)\n"
    + HEADER
    + "NAME = 'dummyslow'\n"
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummyslow", priority=1)}]
"""
    + _FACTORIES
)

#: The same backend name as GOOD, from another distribution and module: a conflict.
DUPLICATE = (
    HEADER
    + "NAME = 'dummygood'\n"
    + _PROBE
    + f"""
@hookimpl
def cubeplug_backends():
    return [{_spec("dummygood")}]
"""
)

#: Plugin code that raises SystemExit (issue 17): at import, and in every hook of a module that imports.
EXIT_AT_IMPORT = "raise SystemExit('dummyexit refuses to load')\n"
EXIT_IN_HOOKS = (
    HEADER
    + "NAME = 'dummyexithooks'\n"
    + """
def probe():
    raise SystemExit(3)

@hookimpl
def cubeplug_backends():
    return [BackendSpec(name='dummyexithooks', description='exits', dialects=('python',), probe=probe,
                        priority=90, kind='gpu')]

@hookimpl
def cubeplug_compute_storage(backend, device, config):
    if backend == NAME:
        raise SystemExit('no storage today')

@hookimpl
def cubeplug_diagnostics(backend):
    raise SystemExit('no diagnostics either')
"""
)
EXIT_IN_SPECS = HEADER + """
@hookimpl
def cubeplug_backends():
    raise SystemExit(1)
"""
INTERRUPT_AT_IMPORT = "raise KeyboardInterrupt\n"


@dataclass(frozen=True)
class Dist:
    """A dummy distribution: its name, version, entry points and module sources."""

    name: str
    version: str
    entry_points: dict[str, str]
    modules: dict[str, str]


DISTS = {
    "good": Dist(
        "cubeplug-dummy-good", "1.0", {"dummygood": "cubeplug_dummy_good"}, {"cubeplug_dummy_good": GOOD}
    ),
    "broken": Dist(
        "cubeplug-dummy-broken",
        "0.1",
        {"dummybroken": "cubeplug_dummy_broken"},
        {"cubeplug_dummy_broken": BROKEN},
    ),
    "specsraise": Dist(
        "cubeplug-dummy-specsraise",
        "0.2",
        {"dummyspecsraise": "cubeplug_dummy_specsraise"},
        {"cubeplug_dummy_specsraise": SPECS_RAISE},
    ),
    "hookraise": Dist(
        "cubeplug-dummy-raise",
        "0.3",
        {"dummyraise": "cubeplug_dummy_raise"},
        {"cubeplug_dummy_raise": HOOK_RAISE},
    ),
    "wrongtype": Dist(
        "cubeplug-dummy-wrong",
        "0.4",
        {"dummywrong": "cubeplug_dummy_wrong"},
        {"cubeplug_dummy_wrong": WRONG_TYPE},
    ),
    "oldapi": Dist(
        "cubeplug-dummy-old", "0.5", {"dummyold": "cubeplug_dummy_old"}, {"cubeplug_dummy_old": OLD_API}
    ),
    "slow": Dist(
        "cubeplug-dummy-slow", "0.6", {"dummyslow": "cubeplug_dummy_slow"}, {"cubeplug_dummy_slow": SLOW}
    ),
    "exitimport": Dist(
        "cubeplug-dummy-exit",
        "0.7",
        {"dummyexit": "cubeplug_dummy_exit"},
        {"cubeplug_dummy_exit": EXIT_AT_IMPORT},
    ),
    "exithooks": Dist(
        "cubeplug-dummy-exithooks",
        "0.8",
        {"dummyexithooks": "cubeplug_dummy_exithooks"},
        {"cubeplug_dummy_exithooks": EXIT_IN_HOOKS},
    ),
    "exitspecs": Dist(
        "cubeplug-dummy-exitspecs",
        "0.9",
        {"dummyexitspecs": "cubeplug_dummy_exitspecs"},
        {"cubeplug_dummy_exitspecs": EXIT_IN_SPECS},
    ),
    "interrupt": Dist(
        "cubeplug-dummy-interrupt",
        "1.1",
        {"dummyinterrupt": "cubeplug_dummy_interrupt"},
        {"cubeplug_dummy_interrupt": INTERRUPT_AT_IMPORT},
    ),
    "duplicate": Dist(
        "cubeplug-dummy-dup", "2.0", {"dummygood": "cubeplug_dummy_dup"}, {"cubeplug_dummy_dup": DUPLICATE}
    ),
}

#: Every module the dummies define (tests drop them from sys.modules afterwards).
MODULES = sorted({m for d in DISTS.values() for m in d.modules})


def install(site: Path, *names: str) -> Path:
    """Write the named dummy distributions (keys of :data:`DISTS`) into ``site``; return ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    for key in names:
        dist = DISTS[key]
        info = site / f"{dist.name.replace('-', '_')}-{dist.version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.name}\nVersion: {dist.version}\n")
        lines = ["[cubeplug.backends]", *(f"{n} = {v}" for n, v in dist.entry_points.items())]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        (info / "RECORD").write_text("")
        for module, source in dist.modules.items():
            (site / f"{module}.py").write_text(textwrap.dedent(source))
    return site
