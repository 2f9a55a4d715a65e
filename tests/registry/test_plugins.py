"""The plugin registry with real entry points: dummy distributions installed on a temporary sys.path."""

from __future__ import annotations

import sys
import time

import pytest

from cubeplug.core import events
from cubeplug.core.backend import Probe
from cubeplug.core.config import Config
from cubeplug.core.errors import BackendUnavailableError, PluginError
from cubeplug.hookspecs import hookimpl
from cubeplug.registry import plugins, selection
from cubeplug.registry.plugins import PluginRegistry
from tests.plugins import fixtures
from tests.plugins.fixtures import InProcess, Installer, hermetic

site = fixtures.site


def build(reg: PluginRegistry, name: str):  # type: ignore[no-untyped-def]
    return reg.build_client(name, 0, Config())


def test_entry_point_names_are_read_without_importing(site: Installer) -> None:
    site("good", "broken", "slow")
    reg = PluginRegistry(env=hermetic())
    start = time.perf_counter()
    entries = reg.entries()
    rows = {r.name: r for r in reg.listing()}
    assert time.perf_counter() - start < 2.0  # the slow plugin sleeps 3 s at import
    assert {"cpu", "dummygood", "dummybroken", "dummyslow"} <= set(entries)
    assert entries["dummygood"].label == "cubeplug-dummy-good==1.0"
    assert all(rows[n].status == "not probed" for n in ("cpu", "dummygood", "dummybroken", "dummyslow"))
    assert not {"cubeplug_dummy_good", "cubeplug_dummy_slow", "cubeplug_dummy_broken"} & set(sys.modules)


def test_good_plugin_builds_a_working_client(site: Installer) -> None:
    site("good")
    reg = PluginRegistry(env=hermetic())
    assert reg.backend("dummygood").spec.priority == 50
    assert reg.probe("dummygood").ok
    client = build(reg, "dummygood")
    try:
        assert client.backend == "dummygood"
        assert bytes(client.read_one(client.create(b"abcd"))) == b"abcd"
    finally:
        client.close()


def test_factory_hooks_are_called_only_on_the_owner(site: Installer) -> None:
    site("good")  # its factory hooks answer for any backend name
    reg = PluginRegistry(env=hermetic())
    reg.load_all()
    for _ in range(2):
        client = build(reg, "cpu")
        try:
            assert client.backend == "cpu"
            assert type(client.server).__name__ == "CpuServer"
        finally:
            client.close()


class _FactoryWatcher:
    """A plugin that builds nothing but wraps every factory hook (as a tracing or timing plugin would)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    @hookimpl(wrapper=True)
    def cubeplug_compute_storage(self, backend, device, config):  # type: ignore[no-untyped-def]
        storage = yield
        self.seen.append(("storage", backend))
        return storage

    @hookimpl(wrapper=True)
    def cubeplug_compute_server(self, backend, device, config, storage, streams):  # type: ignore[no-untyped-def]
        server = yield
        self.seen.append(("server", type(server).__name__))
        return server


def test_factory_hooks_run_through_pluggy_wrappers_and_tracing(site: Installer) -> None:
    site("good")  # another plugin whose factories answer for any backend: still left out for cpu
    reg = PluginRegistry(env=hermetic())
    reg.load_all()
    watcher = _FactoryWatcher()
    reg.pm.register(watcher)
    traced: list[str] = []
    undo = reg.pm.add_hookcall_monitoring(lambda name, impls, kw: traced.append(name), lambda *a: None)
    try:
        client = build(reg, "cpu")
        try:
            assert type(client.server).__name__ == "CpuServer"
        finally:
            client.close()
    finally:
        undo()
    assert watcher.seen == [("storage", "cpu"), ("server", "CpuServer")]
    assert {"cubeplug_compute_storage", "cubeplug_compute_server"} <= set(traced)


def test_broken_import_is_isolated_and_raises_only_when_selected(site: Installer) -> None:
    site("good", "broken")
    reg = PluginRegistry(env=hermetic())
    reg.load_all()
    entry = reg.entries()["dummybroken"]
    assert entry.status == "failed"
    assert "simulated missing dependency" in entry.reason
    assert reg.backend("dummygood") and reg.backend("cpu")
    build(reg, "cpu").close()
    with pytest.raises(PluginError) as info:
        reg.backend("dummybroken")
    err = info.value
    assert isinstance(err.__cause__, ImportError)
    assert err.dist == "cubeplug-dummy-broken" and err.version == "0.1"
    text = str(err)
    assert "cubeplug-dummy-broken==0.1" in text
    assert "dummybroken = cubeplug_dummy_broken" in text
    assert "CUBEPLUG_DISABLE=dummybroken" in text
    rows = {r.name: r for r in reg.listing(probe=True)}
    assert rows["dummybroken"].status == "failed" and "ImportError" in rows["dummybroken"].reason
    assert rows["dummygood"].status == "ok" and rows["cpu"].status == "ok"


def test_raising_in_cubeplug_backends_is_rolled_back(site: Installer) -> None:
    site("specsraise")
    reg = PluginRegistry(env=hermetic())
    entry = reg.load("dummyspecsraise")
    assert entry is not None and entry.status == "failed"
    assert "boom in cubeplug_backends" in entry.reason
    assert reg.pm.get_plugin("cubeplug.backends:dummyspecsraise") is None
    assert all(getattr(p, "__name__", "") != "cubeplug_dummy_specsraise" for p in reg.pm.get_plugins())
    with pytest.raises(PluginError) as info:
        reg.backend("dummyspecsraise")
    assert isinstance(info.value.__cause__, RuntimeError)
    build(reg, "cpu").close()


def test_raising_in_a_factory_hook_raises_plugin_error_from_the_cause(site: Installer) -> None:
    site("hookraise")
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(PluginError) as info:
        build(reg, "dummyraise")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "cubeplug_compute_storage" in str(info.value)
    assert "cubeplug-dummy-raise==0.3" in str(info.value)
    build(reg, "cpu").close()


def test_wrong_return_type_names_the_plugin(site: Installer) -> None:
    site("wrongtype")
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(PluginError, match="returned str, not ComputeStorage") as info:
        build(reg, "dummywrong")
    assert info.value.dist == "cubeplug-dummy-wrong"
    build(reg, "cpu").close()


def test_wrong_api_version_is_refused_with_a_remedy(site: Installer) -> None:
    site("oldapi")
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(PluginError, match="API version 0") as info:
        reg.backend("dummyold")
    assert info.value.remedy and "hook API 1" in info.value.remedy
    assert reg.pm.get_plugin("cubeplug.backends:dummyold") is None
    assert "dummyold" not in {b.name for b in reg.loaded_backends()}


def test_conflicting_duplicate_names_both_distributions(site: Installer) -> None:
    site("good", "duplicate")
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(PluginError) as info:
        reg.backend("dummygood")
    text = str(info.value)
    assert "cubeplug-dummy-good==1.0" in text and "cubeplug-dummy-dup==2.0" in text
    assert "cubeplug_dummy_good" not in sys.modules and "cubeplug_dummy_dup" not in sys.modules
    rows = {r.name: r for r in reg.listing()}
    assert rows["dummygood"].status == "failed"
    build(reg, "cpu").close()


def test_identical_duplicates_are_deduplicated(site: Installer) -> None:
    site("good", where="site")
    site("good", where="site2")  # the same distribution visible twice on sys.path
    reg = PluginRegistry(env=hermetic())
    assert reg.entries()["dummygood"].status == "not loaded"
    assert reg.backend("dummygood").entry.label == "cubeplug-dummy-good==1.0"


def test_disable_blocks_before_import(site: Installer) -> None:
    site("good", "broken")
    reg = PluginRegistry(env=hermetic({"CUBEPLUG_DISABLE": "dummygood, cubeplug-dummy-broken"}))
    reg.load_all()
    assert reg.entries()["dummygood"].status == "blocked"
    assert reg.entries()["dummybroken"].status == "blocked"
    assert "cubeplug_dummy_good" not in sys.modules
    with pytest.raises(BackendUnavailableError, match="CUBEPLUG_DISABLE"):
        reg.backend("dummygood")
    rows = {r.name: r for r in reg.listing(probe=True)}
    assert rows["dummygood"].status == "blocked" and rows["cpu"].status == "ok"


def test_autoload_off_loads_only_the_named_plugins(site: Installer) -> None:
    site("good", "broken")
    reg = PluginRegistry(env=hermetic({"CUBEPLUG_AUTOLOAD": "0", "CUBEPLUG_PLUGINS": "dummygood"}))
    reg.load_all()
    status = {n: e.status for n, e in reg.entries().items()}
    assert status["dummygood"] == "loaded"
    assert status["dummybroken"] == "blocked"
    assert status["cpu"] == "loaded"  # cubeplug's own backends are not third-party plugins
    assert "AUTOLOAD" in reg.entries()["dummybroken"].reason


def test_strict_mode_turns_any_failure_into_an_error(site: Installer) -> None:
    site("broken")
    assert PluginRegistry(env=hermetic()).backend("cpu")
    reg = PluginRegistry(env=hermetic({"CUBEPLUG_STRICT_PLUGINS": "1"}))
    with pytest.raises(PluginError) as info:
        reg.backend("cpu")
    assert isinstance(info.value.__cause__, ImportError)


def test_empty_environment_variables_count_as_unset(site: Installer) -> None:
    site("good")
    reg = PluginRegistry(
        env={
            "CUBEPLUG_DISABLE": "",
            "CUBEPLUG_AUTOLOAD": "",
            "CUBEPLUG_PLUGINS": "",
            "CUBEPLUG_STRICT_PLUGINS": "",
        }
    )
    assert reg.autoload and not reg.strict and not reg.disabled
    assert reg.backend("dummygood")


def test_register_backend_in_process(site: Installer) -> None:
    reg = PluginRegistry(env=hermetic())
    plugin = InProcess()
    assert reg.register_backend(plugin) == ["inproc"]
    assert reg.register_backend(plugin) == ["inproc"]  # identical: deduplicated
    client = build(reg, "inproc")
    assert client.backend == "inproc"
    client.close()
    with pytest.raises(PluginError, match="already provided"):
        reg.register_backend(InProcess("cpu"))
    assert reg.register_backend(InProcess("cpu"), replace=True) == ["cpu"]
    assert reg.backend("cpu").entry.dist == plugins.IN_PROCESS
    reg.unregister_backend("inproc")
    with pytest.raises(BackendUnavailableError):
        reg.backend("inproc")


def test_register_backend_module_level_uses_the_singleton(site: Installer) -> None:
    assert plugins.register_backend(InProcess("inproc2")) == ["inproc2"]
    assert plugins.registry().backend("inproc2").entry.dist == plugins.IN_PROCESS
    assert selection.client("inproc2").backend == "inproc2"


def test_a_probe_that_raises_counts_as_unavailable(site: Installer) -> None:
    def bad_probe() -> Probe:
        raise OSError("driver exploded")

    reg = PluginRegistry(env=hermetic())
    reg.register_backend(InProcess("badprobe", bad_probe))
    probe = reg.probe("badprobe")
    assert not probe.ok and "driver exploded" in probe.reason


def test_unknown_backend_lists_installed_ones_and_the_extra(site: Installer) -> None:
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(BackendUnavailableError) as info:
        reg.backend("nosuch")
    assert "Installed backends: cpu" in str(info.value)
    for name, extra in (
        ("webgpu", "cubeplug[webgpu]"),
        ("cuda", "cubeplug[cuda12]"),
        ("opencl", "cubeplug[opencl]"),
    ):
        if name in reg.entries():
            continue  # installed here: no hint needed
        with pytest.raises(BackendUnavailableError, match=extra.replace("[", r"\[").replace("]", r"\]")):
            reg.backend(name)


def test_observer_hooks_cost_nothing_unless_implemented(
    site: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good")
    events.kernel_compiled("cpu", "k", "python", 0.1)  # no registry yet: a no-op
    reg = plugins.registry()
    reg.backend("cpu")
    assert not reg.observes(events.KERNEL_COMPILED)
    reg.backend("dummygood")
    assert reg.observes(events.KERNEL_COMPILED)
    events.kernel_compiled("cpu", "axpy", "python", 0.1)
    events.out_of_memory("cpu", 1, 0, 0)  # nobody implements it
    module = sys.modules["cubeplug_dummy_good"]
    assert ("compiled", "cpu", "axpy") in module.EVENTS


def test_configure_is_historic_and_diagnostics_are_collected(site: Installer) -> None:
    site("good")
    reg = PluginRegistry(env=hermetic())
    config = Config()
    reg.configure(config)
    reg.backend("dummygood")
    module = sys.modules["cubeplug_dummy_good"]
    assert ("configure", config) in module.EVENTS
    assert reg.diagnostics("cpu") == {"dummy section": {"asked about": "cpu"}}
    assert reg.memory_properties("cpu") is not None


def test_system_exit_from_plugin_code_is_a_plugin_failure(site: Installer) -> None:
    """Issue 17: a plugin raising SystemExit at import ended cubeplug.client() (auto-selection)."""
    site("good", "exitimport", "exithooks", "exitspecs")
    chosen = selection.select("auto")  # imports every plugin, probes every backend
    assert chosen.backend == "dummygood"
    skipped = dict(chosen.skipped)
    assert "SystemExit" in skipped["dummyexit"] and "dummyexit refuses to load" in skipped["dummyexit"]
    assert "SystemExit" in skipped["dummyexithooks"]  # its probe exits: unavailable
    assert "SystemExit" in skipped["dummyexitspecs"]
    client = selection.client()
    assert client.backend == "dummygood"
    reg = plugins.registry()
    with pytest.raises(PluginError) as info:
        reg.backend("dummyexit")
    assert isinstance(info.value.__cause__, SystemExit)
    assert "cubeplug-dummy-exit==0.7" in str(info.value) and "CUBEPLUG_DISABLE=dummyexit" in str(info.value)
    with pytest.raises(PluginError) as info:
        build(reg, "dummyexithooks")
    assert isinstance(info.value.__cause__, SystemExit) and "no storage today" in str(info.value)
    assert "dummyexithooks (error)" in str(reg.diagnostics("cpu"))  # diagnostics never raise
    rows = {r.name: r for r in reg.listing(probe=True)}
    assert rows["dummyexit"].status == "failed" and "SystemExit" in rows["dummyexit"].reason
    assert rows["dummyexitspecs"].status == "failed" and "SystemExit" in rows["dummyexitspecs"].reason
    assert rows["dummyexithooks"].status == "unavailable" and "SystemExit" in rows["dummyexithooks"].reason


def test_keyboard_interrupt_from_plugin_code_is_not_swallowed(site: Installer) -> None:
    site("interrupt")
    reg = PluginRegistry(env=hermetic())
    with pytest.raises(KeyboardInterrupt):
        reg.load("dummyinterrupt")
