"""Selection: selector parsing, use(), the precedence of every source, auto-selection, cached clients."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from cubeplug.core.backend import BackendSpec, Probe
from cubeplug.core.config import EffectiveConfig
from cubeplug.core.errors import BackendUnavailableError, ConfigError, PluginError
from cubeplug.hookspecs import hookimpl
from cubeplug.registry import plugins, selection
from cubeplug.registry import settings as cfgmod
from cubeplug.registry.selection import Selector, parse_selector, resolve, select, use
from cubeplug.registry.settings import load_config
from tests.plugins import fixtures
from tests.plugins.fixtures import InProcess, Installer

site = fixtures.site

EXAMPLES = {
    "cuda": Selector("cuda"),
    "cuda:1": Selector("cuda", 1),
    "opencl:0": Selector("opencl", 0),
    "opencl:pocl:0": Selector("opencl", 0, "pocl"),
    "opencl:pocl": Selector("opencl", None, "pocl"),
    "webgpu": Selector("webgpu"),
    "cpu": Selector("cpu"),
    "auto": Selector("auto"),
    " CUDA:2 ": Selector("cuda", 2),
}


@pytest.mark.parametrize(("text", "expected"), EXAMPLES.items())
def test_parse_selector(text: str, expected: Selector) -> None:
    sel = parse_selector(text)
    assert sel == expected
    assert parse_selector(str(sel)) == sel
    assert parse_selector(sel) is sel


@pytest.mark.parametrize(
    "text", ["", ":", "cuda:", "cuda:-1", "auto:0", "auto:pocl", "9cuda", "a:b:c", "a:1:2", "x:y:z:0"]
)
def test_bad_selectors_give_examples(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_selector(text)
    assert "opencl:pocl:0" in str(info.value) and repr(text) in str(info.value)


def test_non_string_selector() -> None:
    with pytest.raises(ConfigError):
        parse_selector(3)  # type: ignore[arg-type]


def _eff(
    tmp_path: Path, project: str | None = None, user: str | None = None, env: dict[str, str] | None = None
) -> EffectiveConfig:
    (tmp_path / "proj").mkdir(exist_ok=True)
    if project is not None:
        (tmp_path / "proj" / "cubeplug.toml").write_text(f'[backend]\ndefault = "{project}"\n')
    if user is not None:
        (tmp_path / "user.toml").write_text(f'[backend]\ndefault = "{user}"\n')
    return load_config(cwd=tmp_path / "proj", env=env or {}, user_path=tmp_path / "user.toml")


def test_precedence_of_every_source(tmp_path: Path) -> None:
    assert resolve(config=_eff(tmp_path), env={}) == (Selector("auto"), "default (auto)")
    eff = _eff(tmp_path, user="webgpu")
    sel, origin = resolve(config=eff, env={})
    assert sel == Selector("webgpu") and origin.startswith("user config")
    eff = _eff(tmp_path, project="opencl:pocl:0", user="webgpu")
    sel, origin = resolve(config=eff, env={})
    assert sel == Selector("opencl", 0, "pocl") and origin.startswith("project config")
    env = {"CUBEPLUG_BACKEND": "cuda:1"}
    assert resolve(config=eff, env=env) == (Selector("cuda", 1), "env CUBEPLUG_BACKEND")
    with use("cpu"):
        assert resolve(config=eff, env=env) == (Selector("cpu"), "cubeplug.use()")
        assert resolve("webgpu:0", config=eff, env=env) == (Selector("webgpu", 0), "argument")


def test_env_device_and_empty_variables(tmp_path: Path) -> None:
    eff = _eff(tmp_path, project="opencl")
    sel, origin = resolve(config=eff, env={"CUBEPLUG_BACKEND": "", "CUBEPLUG_DEVICE": "2"})
    assert sel == Selector("opencl", 2) and "CUBEPLUG_DEVICE" in origin
    sel, _ = resolve(config=eff, env={"CUBEPLUG_BACKEND": "cuda", "CUBEPLUG_DEVICE": ""})
    assert sel == Selector("cuda")
    with pytest.raises(ConfigError, match="CUBEPLUG_DEVICE"):
        resolve(config=eff, env={"CUBEPLUG_DEVICE": "first"})
    with pytest.raises(ConfigError, match="CUBEPLUG_BACKEND"):
        resolve(config=eff, env={"CUBEPLUG_BACKEND": "cuda::"})


def test_env_backend_default_variable_counts_as_environment(tmp_path: Path) -> None:
    eff = _eff(tmp_path, project="opencl", env={"CUBEPLUG_BACKEND_DEFAULT": "cpu"})
    assert resolve(config=eff, env={}) == (Selector("cpu"), "env CUBEPLUG_BACKEND_DEFAULT")


def test_use_nests_and_is_per_context() -> None:
    seen: list[Selector] = []
    with use("cpu") as outer:
        assert outer == Selector("cpu")
        with use("cuda:1"):
            assert resolve(env={})[0] == Selector("cuda", 1)
        assert resolve(env={})[0] == Selector("cpu")
        t = threading.Thread(target=lambda: seen.append(selection._current.get() or Selector("none")))
        t.start()
        t.join()
    assert seen == [Selector("none")]  # a new thread starts with a fresh context
    assert selection._current.get() is None


def test_use_called_plainly_sets_the_process_default() -> None:
    try:
        assert resolve(env={})[1] != "cubeplug.use() (process default)"
        use("cuda:1")  # no `with`: the process default, for every thread
        assert resolve(env={}) == (Selector("cuda", 1), "cubeplug.use() (process default)")
        seen: list[tuple[Selector, str]] = []
        t = threading.Thread(target=lambda: seen.append(resolve(env={})))
        t.start()
        t.join()
        assert seen == [(Selector("cuda", 1), "cubeplug.use() (process default)")]
        with use("cpu") as sel:  # a block scopes its choice and leaves the default alone
            assert sel == Selector("cpu") and resolve(env={})[0] == Selector("cpu")
            t = threading.Thread(target=lambda: seen.append(resolve(env={})))
            t.start()
            t.join()
            assert seen[-1][0] == Selector("cuda", 1)  # other threads keep the process default
        assert resolve(env={})[0] == Selector("cuda", 1)
        assert repr(use("cpu")) == "cubeplug.use('cpu')"
        assert resolve(env={})[0] == Selector("cpu")
    finally:
        selection.reset()  # forgets the process default
    assert selection._default is None and selection._current.get() is None


def test_auto_picks_gpu_before_cpu_and_records_skips(
    site: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good", "broken")
    chosen = select("auto")
    assert chosen.backend == "dummygood"  # kind gpu, priority 50
    assert ("dummybroken", chosen.skipped[0][1]) in chosen.skipped and "failed" in chosen.skipped[0][1]
    plugins.reset_registry()
    monkeypatch.setenv("DUMMY_UNAVAILABLE", "1")
    chosen = select("auto")
    assert chosen.backend == "cpu"  # the last resort
    assert ("dummygood", "unavailable: no dummy device here") in chosen.skipped
    assert "dummygood: unavailable" in chosen.explain()


class SoftwareGpu(InProcess):
    """A GPU backend whose only device is a software one (as webgpu on lavapipe, opencl on PoCL)."""

    @hookimpl
    def cubeplug_backends(self) -> list[BackendSpec]:
        probe = Probe(True, "software", ("lavapipe (CPU) via Vulkan",), software=True)
        return [BackendSpec(self.name, "software GPU", ("python",), lambda: probe, 90, kind="gpu")]


def test_auto_passes_a_software_gpu_over_for_the_cpu_backend(site: Installer, tmp_path: Path) -> None:
    plugins.register_backend(SoftwareGpu("softgpu"))
    chosen = select("auto")
    assert chosen.backend == "cpu"
    (reason,) = [r for n, r in chosen.skipped if n == "softgpu"]
    assert "software device (lavapipe (CPU) via Vulkan)" in reason and "by name" in reason
    assert select("softgpu").backend == "softgpu"  # asked for by name, it is used
    assert selection.client("softgpu").backend == "softgpu"
    rows = {r.name: r for r in plugins.registry().listing(probe=True)}
    assert rows["softgpu"].status == "ok" and rows["softgpu"].details["software"] is True
    assert "software device" in rows["softgpu"].reason and "software" not in rows["cpu"].details


def test_auto_takes_a_software_gpu_named_in_backend_order(site: Installer, tmp_path: Path) -> None:
    plugins.register_backend(SoftwareGpu("softgpu"))
    eff = _eff(tmp_path, env={"CUBEPLUG_BACKEND_ORDER": "softgpu,cpu"})
    assert select(config=eff).backend == "softgpu"


def test_auto_prefers_a_real_gpu(site: Installer) -> None:
    site("good")
    plugins.register_backend(SoftwareGpu("softgpu"))
    assert select("auto").backend == "dummygood"  # a hardware GPU, priority 50 below the software one's 90


def test_auto_follows_backend_order(site: Installer, tmp_path: Path) -> None:
    site("good")
    eff = _eff(tmp_path, env={"CUBEPLUG_BACKEND_ORDER": "nosuch,cpu,dummygood"})
    chosen = select(config=eff)
    assert chosen.backend == "cpu"
    assert ("nosuch", "named in [backend] order but not installed") in chosen.skipped


def test_explicit_selection_of_an_unavailable_backend(
    site: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good")
    monkeypatch.setenv("DUMMY_UNAVAILABLE", "1")
    with pytest.raises(
        BackendUnavailableError, match=r"no dummy device here.*pip install cubeplug-dummygood"
    ):
        select("dummygood")


def test_selecting_a_broken_plugin_raises_plugin_error_but_others_work(site: Installer) -> None:
    site("broken", "hookraise")
    with pytest.raises(PluginError) as info:
        selection.client("dummybroken")
    assert isinstance(info.value.__cause__, ImportError)
    with pytest.raises(PluginError) as info:
        selection.client("dummyraise")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert selection.client("cpu").backend == "cpu"


def test_unknown_backend_error(site: Installer) -> None:
    with pytest.raises(BackendUnavailableError, match=r"unknown backend 'nosuch'\. Installed backends: cpu"):
        selection.client("nosuch")
    if "webgpu" not in plugins.registry().entries():
        with pytest.raises(BackendUnavailableError, match=r"pip install 'cubeplug\[webgpu\]'"):
            selection.client("webgpu")


def test_clients_are_cached_per_backend_and_device(site: Installer, monkeypatch: pytest.MonkeyPatch) -> None:
    site("good")
    cpu = selection.client("cpu")
    assert selection.client("cpu") is cpu
    assert selection.client("cpu:0") is cpu
    dummy = selection.client("dummygood")
    assert dummy is not cpu and dummy.backend == "dummygood" and cpu.backend == "cpu"
    with use("cpu"):
        assert selection.client() is cpu
    monkeypatch.setenv("CUBEPLUG_BACKEND", "dummygood")
    assert selection.client() is dummy
    limited = selection.client("cpu", memory_limit="1GiB")
    assert limited is not cpu and limited.server.config.memory.limit == 2**30
    assert selection.client("cpu", memory_limit="1GiB") is limited
    assert {id(c) for c in selection.clients()} == {id(cpu), id(dummy), id(limited)}
    with pytest.raises(BackendUnavailableError, match="cpu:1 does not exist"):
        selection.client("cpu:1")


def test_a_closed_cached_client_is_replaced(site: Installer) -> None:
    site("good")
    cpu = selection.client("cpu")
    cpu.close()
    again = selection.client("cpu")
    assert again is not cpu and not again.closed
    assert again.to_numpy(again.create(np.arange(4, dtype=np.int32)), "i32").tolist() == [0, 1, 2, 3]
    assert selection.client("cpu") is again
    assert cpu not in selection.clients()


def test_selector_filter_reaches_the_backend_options(site: Installer) -> None:
    plugins.register_backend(InProcess("filtered"))
    made = selection.client("filtered:fast:0")
    assert made.server.config.backend_options("filtered") == {"filter": "fast"}


def test_client_uses_the_project_config(
    site: Installer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cubeplug.toml").write_text('[backend]\ndefault = "cpu"\n[streaming]\nmax_streams = 3\n')
    monkeypatch.chdir(tmp_path)
    cfgmod.reset_config()
    made = selection.client()
    assert made.backend == "cpu" and made.server.config.streaming.max_streams == 3


def test_logging_level_is_applied_only_when_configured(
    site: Installer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    logger = logging.getLogger("cubeplug")
    logger.setLevel(logging.ERROR)  # the application's own choice
    try:
        selection.client("cpu")
        assert logger.level == logging.ERROR, "the default [logging] level must not override it"
        selection.reset()
        monkeypatch.setenv("CUBEPLUG_LOGGING_LEVEL", "debug")
        selection.client("cpu")
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(logging.NOTSET)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_another_thread_holds_the_client_cache_lock_gets_a_client() -> None:
    import signal
    import time

    selection.client("cpu")  # a cached client the child inherits
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with selection._clients_lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: the lock's holder does not exist here
            code = 1
            try:
                made = selection.client("cpu")
                got = made.to_numpy(made.create(np.arange(3, dtype=np.int32)), "i32").tolist()
                code = 0 if got == [0, 1, 2] else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung in cubeplug.client()")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        t.join()
