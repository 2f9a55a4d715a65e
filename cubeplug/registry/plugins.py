"""The plugin registry: backend discovery through entry points, loading on use, isolation (docs/plugins.md).

Entry-point names of the group ``cubeplug.backends`` are read once (no import); a plugin module is
imported only when its backend is needed, when auto-selection walks the backends, or when listing
with ``--probe``. Each plugin loads in its own ``try``: a half registration is rolled back and the
failure is recorded (dist==version, entry point, cause, remedy); only the selected backend's
failure raises. Factory hooks are called only on the plugin that registered the backend name.

Plugin code (its import, its hooks, its factories, its probe) that raises anything but
KeyboardInterrupt, SystemExit included, is a plugin failure: recorded or raised as PluginError,
never the end of the host process.

Environment: ``CUBEPLUG_DISABLE=a,b`` blocks entry points (or distributions) before import;
``CUBEPLUG_AUTOLOAD=0`` with ``CUBEPLUG_PLUGINS=a,b`` loads only those plugins (plus cubeplug's own);
``CUBEPLUG_STRICT_PLUGINS=1`` turns any plugin failure into an error.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from importlib import metadata
from typing import Any

import pluggy

from cubeplug import hookspecs
from cubeplug.core import events
from cubeplug.core.backend import API_VERSION, BackendSpec, Probe
from cubeplug.core.client import ComputeClient
from cubeplug.core.config import Config
from cubeplug.core.errors import BackendUnavailableError, CubeplugError, PluginError
from cubeplug.core.server import ComputeServer
from cubeplug.core.storage import ComputeStorage, MemoryProperties
from cubeplug.core.stream import EventStreamBackend
from cubeplug.registry.entries import (
    GROUP,
    IN_PROCESS,
    Backend,
    BackendStatus,
    PluginEntry,
    canon,
    entry_points,
    names_in,
    unknown_backend_message,
)
from cubeplug.registry.settings import get_config

log = logging.getLogger("cubeplug.plugins")

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_OBSERVERS = (events.KERNEL_COMPILED, events.OUT_OF_MEMORY)
_TRUE = ("1", "true", "yes", "on")


class PluginRegistry:
    """Entry-point discovery, lazy plugin loading, backend lookup and hook calls for one process."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.disabled = names_in(env.get("CUBEPLUG_DISABLE"))
        self.autoload = env.get("CUBEPLUG_AUTOLOAD", "").strip().lower() not in ("0", "false", "no", "off")
        self.only = names_in(env.get("CUBEPLUG_PLUGINS"))
        self.strict = env.get("CUBEPLUG_STRICT_PLUGINS", "").strip().lower() in _TRUE
        self._lock = threading.RLock()
        self._pm: pluggy.PluginManager | None = None
        self._entries: dict[str, PluginEntry] | None = None
        self._backends: dict[str, Backend] = {}
        self._probes: dict[str, Probe] = {}
        self._observers: frozenset[str] = frozenset()
        self._configured: Any = None

    # ------------------------------------------------------------------ discovery (cheap, no import)
    @property
    def pm(self) -> pluggy.PluginManager:
        """The pluggy manager, created on first use with cubeplug's hookspecs."""
        if self._pm is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            self._pm = pm
        return self._pm

    def entries(self) -> dict[str, PluginEntry]:
        """Every plugin entry by name, from the entry points read once (nothing is imported)."""
        with self._lock:
            if self._entries is None:
                self._entries = {}
                for ep, dist, version in entry_points():
                    self._add_entry(ep, dist, version)
            return self._entries

    def _add_entry(self, ep: metadata.EntryPoint, dist: str | None, version: str | None) -> None:
        assert self._entries is not None
        new = PluginEntry(ep.name, ep.value, dist, version, ep)
        old = self._entries.get(ep.name)
        if old is None:
            self._entries[ep.name] = new
            if reason := self._blocked(new):
                new.status, new.reason = "blocked", reason
            return
        if canon(old.dist) == canon(dist) and old.value == ep.value:
            return  # the same distribution seen twice on sys.path: identical, deduplicated
        err = PluginError(
            f"two distributions provide the backend {ep.name!r}: {old.label} ({old.value}) and "
            f"{new.label} ({new.value})",
            dist=new.dist,
            version=new.version,
            entry_point=f"{ep.name} = {ep.value}",
            remedy=f"uninstall one of {old.dist} and {new.dist}",
        )
        if old.status != "blocked":
            old.status, old.reason, old.error = "failed", f"conflict: {old.label} and {new.label}", err
        old.dist, old.version = f"{old.label} + {new.label}", None

    def _blocked(self, entry: PluginEntry) -> str:
        if entry.name in self.disabled or (entry.dist and entry.dist in self.disabled):
            return "disabled by CUBEPLUG_DISABLE"
        if not self.autoload and not entry.builtin and entry.name not in self.only:
            return "CUBEPLUG_AUTOLOAD=0 and not named in CUBEPLUG_PLUGINS"
        return ""

    def names(self) -> list[str]:
        """Every backend name known: entry points and the backends of loaded plugins, sorted."""
        with self._lock:
            return sorted(set(self.entries()) | set(self._backends))

    def failures(self) -> list[PluginEntry]:
        """Plugins that failed to load so far."""
        return [e for e in self.entries().values() if e.status == "failed"]

    # ------------------------------------------------------------------ loading
    def load(self, name: str) -> PluginEntry | None:
        """Import and register the plugin of entry point ``name`` once; failures are recorded, not raised."""
        with self._lock:
            entry = self.entries().get(name)
            if entry is None or entry.status != "not loaded":
                return entry
            assert entry.ep is not None
            try:
                plugin = entry.ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self._fail(entry, "failed to import", exc, f"reinstall or upgrade {entry.dist}")
                return entry
            self._register(entry, plugin)
            return entry

    def load_all(self) -> list[PluginEntry]:
        """Load every plugin that is not blocked; with CUBEPLUG_STRICT_PLUGINS=1, raise the first failure."""
        for name in list(self.entries()):
            self.load(name)
        self._raise_if_strict()
        return list(self.entries().values())

    def _raise_if_strict(self) -> None:
        if self.strict:
            for entry in self.failures():
                assert entry.error is not None
                raise entry.error from entry.error.cause

    def _fail(self, entry: PluginEntry, what: str, exc: BaseException, remedy: str) -> None:
        if isinstance(exc, PluginError):
            err = exc
        elif entry.dist == IN_PROCESS:
            err = self._error(entry, what, cause=exc)
        else:
            remedy = f"{remedy}, or block it with CUBEPLUG_DISABLE={entry.name}"
            err = self._error(entry, f"plugin {entry.name!r} {what}", remedy, cause=exc)
        detail = str(exc).split("; ")[0] if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
        entry.status, entry.reason, entry.error = "failed", f"{what}: {detail}", err
        log.warning("%s", err)

    def _register(self, entry: PluginEntry, plugin: Any) -> None:
        pm = self.pm
        for other in self.entries().values():
            if other.plugin is plugin and other is not entry:  # the same module under a second name
                entry.status, entry.plugin, entry.backends = "loaded", plugin, other.backends
                return
        registered, added = False, []
        try:
            pm.register(plugin, name=f"{GROUP}:{entry.name}")
            registered = True
            specs = self._specs(entry, plugin)
            for spec in specs:
                self._check_free(entry, spec.name)
                self._backends[spec.name] = Backend(spec, entry)
                added.append(spec.name)
            if entry.dist != IN_PROCESS and entry.name not in added:
                raise self._error(
                    entry,
                    f"entry point {entry.name!r} names a backend its plugin does not provide "
                    f"(it provides: {', '.join(added) or 'none'})",
                    remedy="make the entry-point name the backend's name",
                )
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            for name in added:
                self._backends.pop(name, None)
            if registered:
                pm.unregister(plugin)
            self._fail(entry, "failed to register", exc, f"report it to the authors of {entry.dist}")
            return
        entry.status, entry.plugin, entry.backends = "loaded", plugin, tuple(added)
        self._update_observers()

    def _specs(self, entry: PluginEntry, plugin: Any) -> list[BackendSpec]:
        hook = self._own_impl(plugin, "cubeplug_backends")
        if hook is None:
            raise self._error(entry, "the plugin implements no cubeplug_backends hook")
        specs = hook()
        if not isinstance(specs, (list, tuple)) or not all(isinstance(s, BackendSpec) for s in specs):
            raise self._error(
                entry, f"cubeplug_backends returned {type(specs).__name__}, not a list of BackendSpec"
            )
        for spec in specs:
            if spec.api_version != API_VERSION:
                raise self._error(
                    entry,
                    f"backend {spec.name!r} declares hook API version {spec.api_version}, "
                    f"but this cubeplug speaks version {API_VERSION}",
                    remedy=f"install a release of {entry.dist} built for cubeplug hook API {API_VERSION}",
                )
            if not _NAME.match(spec.name) or spec.name == "auto":
                raise self._error(
                    entry, f"invalid backend name {spec.name!r} (lowercase letters, digits, - _)"
                )
        return list(specs)

    def _check_free(self, entry: PluginEntry, name: str) -> None:
        other: PluginEntry | None = None
        if name in self._backends and self._backends[name].entry.plugin is not entry.plugin:
            other = self._backends[name].entry
        owner = self.entries().get(name)
        if (
            other is None
            and owner is not None
            and owner is not entry
            and owner.status != "blocked"
            and owner.value != entry.value
        ):
            other = owner
        if other is not None:
            raise self._error(
                entry,
                f"two distributions provide the backend {name!r}: {other.label} ({other.value}) and "
                f"{entry.label} ({entry.value})",
                remedy=f"uninstall one of {other.dist} and {entry.dist}",
            )

    def _error(
        self, entry: PluginEntry, message: str, remedy: str | None = None, cause: BaseException | None = None
    ) -> PluginError:
        """The PluginError of ``entry``: an in-process plugin named by its module, an installed one
        by its distribution, version and entry point."""
        if entry.dist == IN_PROCESS:
            return PluginError(f"in-process plugin {entry.value}: {message}", remedy=remedy, cause=cause)
        return PluginError(
            message,
            dist=entry.dist,
            version=entry.version,
            entry_point=f"{entry.name} = {entry.value}",
            cause=cause,
            remedy=remedy or f"report it to the authors of {entry.dist}",
        )

    # ------------------------------------------------------------------ in-process registration
    def register_backend(self, plugin: Any, name: str | None = None, *, replace: bool = False) -> list[str]:
        """Register a module or object holding hook implementations, in this process; return its backends."""
        with self._lock:
            entries = self.entries()
            for entry in entries.values():
                if entry.plugin is plugin and entry.status == "loaded":
                    return list(entry.backends)
            module = getattr(plugin, "__name__", None) or type(plugin).__qualname__
            for entry in entries.values():
                if (
                    entry.value == module
                    and entry.status == "not loaded"
                    and (name is None or name == entry.name)
                ):
                    self._register(entry, plugin)  # the installed entry point itself: identical
                    self._raise_for(entry)
                    return list(entry.backends)
            hook = getattr(plugin, "cubeplug_backends", None)
            if not callable(hook):
                raise PluginError(
                    f"{module} implements no cubeplug_backends hook", remedy="add one with @hookimpl"
                )
            specs = [s for s in hook() if isinstance(s, BackendSpec)]  # checked again on registration
            key = name or (specs[0].name if specs else module)
            for spec in specs:
                owner = entries.get(spec.name) or (
                    self._backends[spec.name].entry if spec.name in self._backends else None
                )
                if owner is not None and owner.plugin is not plugin:
                    if not replace:
                        raise PluginError(
                            f"backend {spec.name!r} is already provided by {owner.label} ({owner.value})",
                            dist=IN_PROCESS,
                            remedy="pass replace=True to shadow it in this process",
                        )
                    self._remove(owner, f"replaced in process by {module}")
            entry = PluginEntry(key, module, IN_PROCESS, None)
            entries[key] = entry
            self._register(entry, plugin)
            if entry.status != "loaded":
                del entries[key]
            self._raise_for(entry)
            return list(entry.backends)

    def unregister_backend(self, name: str) -> None:
        """Remove the plugin that provides backend ``name`` (registered in process or loaded)."""
        with self._lock:
            backend = self._backends.get(name)
            entry = backend.entry if backend else self.entries().get(name)
            if entry is not None:
                self._remove(entry, "unregistered")
                if entry.dist == IN_PROCESS:
                    self.entries().pop(entry.name, None)

    def _remove(self, entry: PluginEntry, reason: str) -> None:
        for bname in entry.backends:
            self._backends.pop(bname, None)
            self._probes.pop(bname, None)
        if entry.plugin is not None and self.pm.is_registered(entry.plugin):
            self.pm.unregister(entry.plugin)
        entry.status, entry.reason, entry.plugin, entry.backends = "blocked", reason, None, ()
        self._update_observers()

    def _raise_for(self, entry: PluginEntry) -> None:
        if entry.status == "failed" and entry.error is not None:
            raise entry.error from entry.error.cause

    # ------------------------------------------------------------------ backend lookup
    def backend(self, name: str) -> Backend:
        """The backend ``name``, loading its plugin; raises PluginError (cause chained) if it failed."""
        with self._lock:
            if self.strict:
                self.load_all()
            if name in self._backends:
                return self._backends[name]
            entry = self.entries().get(name)
            if entry is None:
                raise BackendUnavailableError(unknown_backend_message(name, self.names()))
            if entry.status == "blocked":
                raise BackendUnavailableError(f"backend {name!r} ({entry.label}) is blocked: {entry.reason}")
            self.load(name)
            self._raise_for(entry)
            if name not in self._backends:
                raise BackendUnavailableError(f"backend {name!r} is not registered ({entry.reason})")
            return self._backends[name]

    def loaded_backends(self) -> list[Backend]:
        """The backends of the plugins loaded so far."""
        return list(self._backends.values())

    def probe(self, name: str) -> Probe:
        """The backend's probe result, computed once; a probe that raises counts as unavailable."""
        with self._lock:
            if name not in self._probes:
                spec = self.backend(name).spec
                try:
                    result = spec.probe()
                    if not isinstance(result, Probe):
                        result = Probe.unavailable(f"probe returned {type(result).__name__}, not Probe")
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    result = Probe.unavailable(f"probe raised {type(exc).__name__}: {exc}")
                self._probes[name] = result
            return self._probes[name]

    # ------------------------------------------------------------------ hooks
    def _own_impl(self, plugin: Any, hook: str) -> Any:
        """``plugin``'s own implementation of ``hook`` (at registration, to read what it provides)."""
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            if impl.plugin is plugin:
                return impl.function
        return None

    def _caller(self, entry: PluginEntry, hook: str) -> Any:
        """``hook`` called through pluggy on the plugin of ``entry``: the other plugins' implementations
        of a factory hook are left out (a backend's factories answer only for it, whatever the order
        of registration), their wrappers are not (a tracing or timing wrapper sees every factory)."""
        caller = getattr(self.pm.hook, hook)
        others = [
            impl.plugin
            for impl in caller.get_hookimpls()
            if impl.plugin is not entry.plugin and not (impl.hookwrapper or impl.wrapper)
        ]
        return self.pm.subset_hook_caller(hook, others) if others else caller

    def call(
        self, name: str, hook: str, expected: type | None = None, optional: bool = False, **kw: Any
    ) -> Any:
        """Call the factory ``hook`` for backend ``name`` (on its plugin only), checking the result's type."""
        backend = self.backend(name)
        entry = backend.entry
        try:
            result = self._caller(entry, hook)(**kw)
        except CubeplugError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise self._error(entry, f"{hook} of backend {name!r} raised", cause=exc) from exc
        if result is None:
            if optional:
                return None
            raise self._error(entry, f"the plugin of backend {name!r} returned nothing from {hook}")
        if expected is not None and not isinstance(result, expected):
            raise self._error(
                entry,
                f"{hook} of backend {name!r} returned {type(result).__name__}, not {expected.__name__}",
            )
        return result

    def build_client(self, name: str, device: int, config: Config) -> ComputeClient:
        """Build storage, streams and server for ``device`` of backend ``name`` and wrap them in a client."""
        if name in _forked_backends and not self.backend(name).spec.survives_fork:
            raise BackendUnavailableError(
                f"the {name} backend was in use before this process forked, and its driver does not "
                f"survive fork (its threads and device belong to the parent): start worker processes "
                f"with the \"spawn\" method (multiprocessing.get_context('spawn')) or \"forkserver\", "
                f"or use the {name} backend only in the children"
            )
        _used_backends.add(name)
        args: dict[str, Any] = {"backend": name, "device": device, "config": config}
        storage = self.call(name, "cubeplug_compute_storage", ComputeStorage, **args)
        streams = self.call(name, "cubeplug_event_stream_backend", EventStreamBackend, optional=True, **args)
        server = self.call(
            name, "cubeplug_compute_server", ComputeServer, storage=storage, streams=streams, **args
        )
        return ComputeClient(server)

    def memory_properties(
        self, name: str, device: int = 0, config: Config | None = None
    ) -> MemoryProperties | None:
        """The backend's memory properties for ``device`` (None if its plugin does not say)."""
        result: MemoryProperties | None = self.call(
            name,
            "cubeplug_memory_properties",
            MemoryProperties,
            optional=True,
            backend=name,
            device=device,
            config=config if config is not None else get_config(),
        )
        return result

    def configure(self, config: Config) -> None:
        """Hand the effective config to every plugin through the historic ``cubeplug_configure`` hook."""
        with self._lock:
            if config is not self._configured:
                self._configured = config
                try:
                    self.pm.hook.cubeplug_configure.call_historic(kwargs={"config": config})
                except KeyboardInterrupt:
                    raise
                except BaseException:
                    log.warning("a plugin's cubeplug_configure hook failed", exc_info=True)

    def diagnostics(self, name: str) -> dict[str, Any]:
        """Merged ``cubeplug_diagnostics`` sections about ``name`` from every loaded plugin; never raises."""
        out: dict[str, Any] = {}
        for impl in self.pm.hook.cubeplug_diagnostics.get_hookimpls():
            plugin_name = self.pm.get_name(impl.plugin) or "?"
            try:
                result = impl.function(*({"backend": name}[a] for a in impl.argnames))
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                out[f"{plugin_name} (error)"] = f"{type(exc).__name__}: {exc}"
                continue
            if isinstance(result, Mapping):
                out.update(result)
            elif result is not None:
                out[f"{plugin_name} (error)"] = f"returned {type(result).__name__}, not dict"
        return out

    def _update_observers(self) -> None:
        pm = self.pm
        self._observers = frozenset(h for h in _OBSERVERS if getattr(pm.hook, h).get_hookimpls())

    def observes(self, event: str) -> bool:
        """True when a loaded plugin implements the observer hook ``event`` (:mod:`cubeplug.core.events`)."""
        return event in self._observers

    def notify(self, event: str, **kwargs: Any) -> None:
        """Call the observer hook ``event`` on each plugin implementing it; failures are logged only."""
        if event not in self._observers:
            return
        try:
            getattr(self.pm.hook, event)(**kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException:
            log.warning("observer hook %s failed", event, exc_info=True)

    # ------------------------------------------------------------------ listing
    def listing(self, probe: bool = False) -> list[BackendStatus]:
        """One row per backend for ``cubeplug list``; only ``probe=True`` imports plugins."""
        with self._lock:
            if probe:
                for name in list(self.entries()):
                    self.load(name)
            rows: dict[str, BackendStatus] = {}
            for entry in self.entries().values():
                if entry.status in ("failed", "blocked") or (entry.status == "not loaded"):
                    status = "not probed" if entry.status == "not loaded" else entry.status
                    rows[entry.name] = BackendStatus(
                        entry.name, entry.label, status, entry.reason, f"{entry.name} = {entry.value}"
                    )
            for backend in self._backends.values():
                spec, entry = backend.spec, backend.entry
                status, reason = "not probed", ""
                devices: tuple[str, ...] = ()
                details: dict[str, Any] = {}
                if probe or spec.name in self._probes:
                    result = self.probe(spec.name)
                    status = "ok" if result.ok else "unavailable"
                    reason, devices, details = result.reason, result.devices, dict(result.details)
                    if result.ok and result.software and spec.kind != "cpu":
                        details["software"] = True
                        reason += "; software device: auto-selection passes it over unless asked for"
                rows[spec.name] = BackendStatus(
                    spec.name,
                    entry.label,
                    status,
                    reason,
                    f"{entry.name} = {entry.value}",
                    spec.kind,
                    spec.priority,
                    spec.description,
                    tuple(devices),
                    details,
                )
            return [rows[k] for k in sorted(rows)]


#: Backends this process built a client of (their drivers are initialised).
_used_backends: set[str] = set()
#: In a forked child: the backends the parent had used before the fork.
_forked_backends: set[str] = set()


def _after_fork_in_child() -> None:
    """In a forked child: remember which drivers the parent initialised; fresh registry locks (another
    thread of the parent may have held them)."""
    global _registry_lock
    _forked_backends.update(_used_backends)
    _registry_lock = threading.Lock()
    reg = _registry
    if reg is not None:
        reg._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------------------- singleton
_registry: PluginRegistry | None = None
_registry_lock = threading.Lock()


def registry() -> PluginRegistry:
    """The process-wide plugin registry (created on first use, reading the environment then)."""
    global _registry
    reg = _registry
    if reg is None:
        with _registry_lock:
            if _registry is None:
                _registry = PluginRegistry()
                events.set_observer(_registry)  # the core's events reach the plugins' observer hooks
            reg = _registry
    return reg


def reset_registry() -> None:
    """Forget the registry (for tests); the next use reads entry points and the environment again."""
    global _registry
    with _registry_lock:
        _registry = None
        events.set_observer(None)


def register_backend(plugin: Any, name: str | None = None, *, replace: bool = False) -> list[str]:
    """Register a module or object with cubeplug hook implementations in this process (tests, notebooks)."""
    return registry().register_backend(plugin, name, replace=replace)
