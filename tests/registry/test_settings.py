"""Config loading: every source, their precedence, typed validation and the origin of every value."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubeplug.core.config import Config, Origin
from cubeplug.core.errors import ConfigError
from cubeplug.registry import settings as cfgmod
from cubeplug.registry.settings import load_config, parse_memory_limit, parse_size, with_overrides


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A project tree: root/, root/sub/deeper/, and a user config file path that does not exist yet."""
    (tmp_path / "root" / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    return tmp_path


def load(tree: Path, cwd: str = "root/sub/deeper", env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return load_config(cwd=tree / cwd, env=env or {}, user_path=tree / "home" / "cubeplug.toml")


def test_defaults_match_the_dataclasses(tree: Path) -> None:
    eff = load(tree)
    assert eff.config == Config()
    assert eff.files == ()
    assert all(origin.kind == "default" for _, _, origin in eff.items())
    keys = {k for k, _, _ in eff.items()}
    assert {"memory.limit", "backend.default", "streaming.max_streams", "logging.level"} <= keys


def test_user_file(tree: Path) -> None:
    (tree / "home" / "cubeplug.toml").write_text('[memory]\nlimit = "512MiB"\n[logging]\nlevel = "debug"\n')
    eff = load(tree)
    assert eff.config.memory.limit == 512 * 2**20
    assert eff.config.logging.level == "debug"
    assert eff.origin("memory.limit") == Origin("user", str(tree / "home" / "cubeplug.toml"))
    assert eff.origin("streaming.policy").kind == "default"


def test_project_file_found_walking_up(tree: Path) -> None:
    (tree / "root" / "cubeplug.toml").write_text('[streaming]\nmax_streams = 3\npolicy = "single"\n')
    eff = load(tree)
    assert eff.config.streaming.max_streams == 3 and eff.config.streaming.policy == "single"
    assert eff.origin("streaming.max_streams").kind == "project"
    assert str(tree / "root" / "cubeplug.toml") in str(eff.origin("streaming.max_streams"))


def test_pyproject_tool_table(tree: Path) -> None:
    (tree / "root" / "sub" / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.cubeplug.compilation]\ncheck_mode = "unchecked"\n'
    )
    eff = load(tree)
    assert eff.config.compilation.check_mode == "unchecked"
    assert "[tool.cubeplug]" in str(eff.origin("compilation.check_mode"))


def test_nearest_file_wins_and_pyproject_without_table_is_skipped(tree: Path) -> None:
    (tree / "root" / "cubeplug.toml").write_text('[profiling]\nlevel = "full"\n')
    (tree / "root" / "sub" / "pyproject.toml").write_text('[tool.cubeplug.profiling]\nlevel = "basic"\n')
    (tree / "root" / "sub" / "deeper" / "pyproject.toml").write_text('[project]\nname = "no-table"\n')
    assert load(tree).config.profiling.level == "basic"  # sub/ is nearer than root/
    (tree / "root" / "sub" / "deeper" / "cubeplug.toml").write_text('[profiling]\nlevel = "disabled"\n')
    assert load(tree).origin("profiling.level").source.endswith("deeper/cubeplug.toml")


def test_same_directory_tie_cubeplug_toml_wins(tree: Path) -> None:
    (tree / "root" / "cubeplug.toml").write_text('[logging]\nlevel = "info"\n')
    (tree / "root" / "pyproject.toml").write_text('[tool.cubeplug.logging]\nlevel = "debug"\n')
    eff = load(tree, cwd="root")
    assert eff.config.logging.level == "info"
    assert eff.notes and "takes precedence" in eff.notes[0]


def test_precedence_env_over_project_over_user_over_default(tree: Path) -> None:
    (tree / "home" / "cubeplug.toml").write_text(
        '[memory]\nlimit = "1GiB"\npersistent_memory = "disabled"\n[autotune]\nlevel = "full"\n'
    )
    (tree / "root" / "cubeplug.toml").write_text('[memory]\nlimit = "2GB"\npersistent_memory = "enforced"\n')
    eff = load(tree, env={"CUBEPLUG_MEMORY_LIMIT": "80%"})
    assert eff.config.memory.limit == "80%" and eff.origin("memory.limit") == Origin(
        "env", "CUBEPLUG_MEMORY_LIMIT"
    )
    assert (
        eff.config.memory.persistent_memory == "enforced"
        and eff.origin("memory.persistent_memory").kind == "project"
    )
    assert eff.config.autotune.level == "full" and eff.origin("autotune.level").kind == "user"
    assert eff.config.streaming.max_streams == 8 and eff.origin("streaming.max_streams").kind == "default"
    assert [str(tree / "home" / "cubeplug.toml"), str(tree / "root" / "cubeplug.toml")] == list(eff.files)


def test_empty_environment_variable_counts_as_unset(tree: Path) -> None:
    (tree / "root" / "cubeplug.toml").write_text('[logging]\nlevel = "info"\n')
    eff = load(tree, env={"CUBEPLUG_LOGGING_LEVEL": "", "CUBEPLUG_MEMORY_LIMIT": ""})
    assert eff.config.logging.level == "info" and eff.config.memory.limit is None


def test_environment_types(tree: Path) -> None:
    env = {
        "CUBEPLUG_STREAMING_MAX_STREAMS": "4",
        "CUBEPLUG_COMPILATION_CACHE": "off",
        "CUBEPLUG_AUTOTUNE_CACHE": "yes",
        "CUBEPLUG_BACKEND_ORDER": "opencl, cpu",
        "CUBEPLUG_BACKEND_DEFAULT": "opencl:pocl:0",
        "CUBEPLUG_AUTOTUNE_BENCH_SAMPLES": "12",
        "CUBEPLUG_BACKENDS_WEBGPU_POWER_PREFERENCE": "high-performance",
        "CUBEPLUG_MEMORY_PERSISTENT_MEMORY": "Disabled",
        "CUBEPLUG_BACKEND": "cpu",  # a selection variable, not a config key
        "CUBEPLUG_DISABLE": "x",
    }
    c = load(tree, env=env).config
    assert c.streaming.max_streams == 4
    assert c.compilation.cache is False and c.autotune.cache is True
    assert c.backend.order == ["opencl", "cpu"] and c.backend.default == "opencl:pocl:0"
    assert c.autotune.bench == {"samples": 12}
    assert c.backend_options("webgpu") == {"power_preference": "high-performance"}
    assert c.memory.persistent_memory == "disabled"


def test_backends_tables_and_bench_are_free_form(tree: Path) -> None:
    (tree / "root" / "cubeplug.toml").write_text(
        '[backends.opencl]\nplatform = "pocl"\n[backends.webgpu]\npower_preference = "low-power"\n'
        "[autotune.bench]\nwarmup = 2\nsamples = 10\n"
    )
    eff = load(tree)
    assert eff.config.backend_options("opencl") == {"platform": "pocl"}
    assert eff.config.autotune.bench == {"warmup": 2, "samples": 10}
    assert eff.origin("backends.opencl.platform").kind == "project"
    assert eff.origin("autotune.bench.samples").kind == "project"


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ("[memory]\nlimt = 1\n", "memory.limt", "persistent_memory, limit"),
        ("[memmory]\nlimit = 1\n", "memmory", "backend, memory"),
        (
            '[memory]\npersistent_memory = "sometimes"\n',
            "memory.persistent_memory",
            "enabled, disabled, enforced",
        ),
        ('[memory]\nlimit = "lots"\n', "memory.limit", "512MiB"),
        ('[memory]\nlimit = "150%"\n', "memory.limit", "80%"),
        ("[memory]\nlimit = true\n", "memory.limit", "bytes"),
        ("[streaming]\nmax_streams = 0\n", "streaming.max_streams", "positive integer"),
        ('[streaming]\nmax_streams = "4"\n', "streaming.max_streams", "positive integer"),
        ("[streaming]\nmax_streams = 100000000000\n", "streaming.max_streams", "up to 1024"),
        ('[streaming]\npolicy = "per-process"\n', "streaming.policy", "per-thread, single"),
        ('[autotune]\nlevel = "max"\n', "autotune.level", "minimal, balanced, extensive, full"),
        ('[autotune]\ncache = "yes"\n', "autotune.cache", "true, false"),
        ("[autotune.bench]\nsamples = [1]\n", "autotune.bench.samples", "table"),
        ('[compilation]\ncheck_mode = "sometimes"\n', "compilation.check_mode", "checked, unchecked"),
        ('[profiling]\nlevel = "loud"\n', "profiling.level", "disabled, basic, full"),
        ('[logging]\nlevel = "trace"\n', "logging.level", "warning, info, debug"),
        ('[backend]\ndefault = "cuda:x:y"\n', "backend.default", "opencl:pocl:0"),
        ('[backend]\norder = "cuda"\n', "backend.order", "list of backend names"),
        ('[backends]\nopencl = "pocl"\n', "backends.opencl", None),
        ('memory = "x"\n', "memory", None),
    ],
)
def test_bad_files_name_the_file_the_key_and_the_allowed_values(
    tree: Path, text: str, key: str, allowed: str | None
) -> None:
    path = tree / "root" / "cubeplug.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(tree)
    err = info.value
    assert err.source == str(path) and str(path) in str(err)
    assert err.key == key and key in str(err)
    if allowed:
        assert err.allowed and allowed in err.allowed and allowed in str(err)


def test_malformed_toml_names_the_file(tree: Path) -> None:
    for path in (tree / "root" / "cubeplug.toml", tree / "home" / "cubeplug.toml"):
        path.write_text("[memory\nlimit = ")
        with pytest.raises(ConfigError, match="malformed TOML") as info:
            load(tree)
        assert info.value.source == str(path)
        path.unlink()
    bad = tree / "root" / "pyproject.toml"
    bad.write_text("[tool.cubeplug\n")
    with pytest.raises(ConfigError, match="malformed TOML"):
        load(tree)


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"CUBEPLUG_MEMORY_LIMT": "1"}, "memory.limt"),
        ({"CUBEPLUG_STREAMING_MAX_STREAMS": "many"}, "streaming.max_streams"),
        ({"CUBEPLUG_STREAMING_MAX_STREAMS": "100000000000"}, "streaming.max_streams"),
        ({"CUBEPLUG_COMPILATION_CACHE": "perhaps"}, "compilation.cache"),
        ({"CUBEPLUG_BACKEND_DEFAULT": "::"}, "backend.default"),
        ({"CUBEPLUG_MEMORY_LIMIT": "-5"}, "memory.limit"),
    ],
)
def test_bad_environment_variables_name_the_variable(tree: Path, env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tree, env=env)
    var = next(iter(env))
    assert info.value.key == key and var in str(info.value)


def test_sizes_and_limits() -> None:
    assert parse_size(4096) == 4096
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1.5 GiB") == 3 * 2**29
    assert parse_size("1G") == 2**30
    assert parse_memory_limit("80%") == "80%"
    assert parse_memory_limit("none") is None
    for bad in ("12 parsecs", -1, "0", 1.5, "0%"):
        with pytest.raises(ValueError):
            parse_memory_limit(bad)


def test_overrides(tree: Path) -> None:
    eff = load(tree)
    new = with_overrides(eff, {"memory_limit": "1GiB", "streaming": {"max_streams": 2}})
    assert new.config.memory.limit == 2**30 and new.config.streaming.max_streams == 2
    assert new.origin("memory.limit").kind == "argument"
    assert eff.config.memory.limit is None  # the original is untouched
    with pytest.raises(ConfigError, match="unknown key"):
        with_overrides(eff, {"memory_limt": 1})


def test_process_cache_reload_and_reset(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree / "root")
    monkeypatch.setattr(cfgmod, "user_config_path", lambda: tree / "home" / "cubeplug.toml")
    monkeypatch.delenv("CUBEPLUG_LOGGING_LEVEL", raising=False)
    cfgmod.reset_config()
    try:
        first = cfgmod.effective_config()
        assert cfgmod.effective_config() is first
        (tree / "root" / "cubeplug.toml").write_text('[logging]\nlevel = "debug"\n')
        assert cfgmod.get_config().logging.level == first.config.logging.level  # cached
        assert cfgmod.reload_config().config.logging.level == "debug"
        monkeypatch.setenv("CUBEPLUG_LOGGING_LEVEL", "info")
        cfgmod.reset_config()
        assert cfgmod.get_config().logging.level == "info"
    finally:
        cfgmod.reset_config()


def test_too_many_streams_is_a_config_error_at_client_creation(tree: Path) -> None:
    """Issue 17: ``max_streams = 10**11`` surfaced as PluginError ... MemoryError from the server."""
    eff = load(tree)
    with pytest.raises(ConfigError, match="max_streams") as info:
        with_overrides(eff, {"streaming": {"max_streams": 100_000_000_000}})
    assert "1024" in str(info.value)
    assert with_overrides(eff, {"streaming": {"max_streams": 1024}}).config.streaming.max_streams == 1024
