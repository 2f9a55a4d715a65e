"""Settings loading: the config schema, the files and variables read, validation, the process cache.

Users' guide: docs/config.md and docs/backends.md.

Precedence, first that is set wins: ``CUBEPLUG_<SECTION>_<KEY>`` environment variables (an empty one
counts as unset) > the project file > the user file (``platformdirs.user_config_dir("cubeplug")/
cubeplug.toml``) > the defaults of the dataclasses in :mod:`cubeplug.core.config`. The project file
is the nearest ``cubeplug.toml`` or ``pyproject.toml`` holding a ``[tool.cubeplug]`` table, walking up
from the working directory; when one directory holds both, ``cubeplug.toml`` wins and the pyproject
table is ignored. Files are not merged with each other beyond that: one project file, one user file.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubeplug.core.config import DEFAULT, Config, EffectiveConfig, Origin
from cubeplug.core.errors import ConfigError
from cubeplug.registry.selector import parse_selector

# ---------------------------------------------------------------------------------------- values
#: Size units: ``K``/``KiB`` are binary (1024), ``KB`` is decimal (1000); the same for M, G, T.
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = 1024**_i
    _UNITS[_p + "b"] = 1000**_i
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_size(value: Any) -> int:
    """Bytes from an int or a string such as ``"512MiB"``, ``"2GB"``, ``"1.5 GiB"`` or ``"4096"``."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    raise ValueError(f"not a size: {value!r}")


def parse_memory_limit(value: Any) -> int | str | None:
    """A memory limit: bytes (int or ``"512MiB"``/``"2GB"``), a share of the device (``"80%"``) or None."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "")):
        return None
    if isinstance(value, str) and (m := _PERCENT.match(value)):
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ValueError("a percentage must be in (0, 100]")
        return f"{m.group(1)}%"
    size = parse_size(value)
    if size == 0:
        raise ValueError('a memory limit must be above 0 bytes (use "none" for no limit)')
    return size


def _str(value: Any, env: bool) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value.strip()


def _choice(*allowed: str) -> Callable[[Any, bool], str]:
    def parse(value: Any, env: bool) -> str:
        text = _str(value, env).lower()
        if text not in allowed:
            raise ValueError(f"{value!r} is not one of them")
        return text

    return parse


def _bool(value: Any, env: bool) -> bool:
    if isinstance(value, bool):
        return value
    if env and isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
    raise ValueError(f"{value!r} is not a boolean")


def _positive_int(value: Any, env: bool) -> int:
    if env and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{value!r} is not a positive integer")
    return value


#: The most streams ``[streaming] max_streams`` allows: every server keeps a slot per stream (a queue,
#: a memory management, a native stream), so a larger figure only costs memory and threads.
MAX_STREAMS = 1024


def _stream_count(value: Any, env: bool) -> int:
    count = _positive_int(value, env)
    if count > MAX_STREAMS:
        raise ValueError(
            f"{count} streams is more than cubeplug keeps ({MAX_STREAMS}); streams beyond the limit "
            f"share slots (id % max_streams), so a smaller number loses nothing"
        )
    return count


def _names(value: Any, env: bool) -> list[str]:
    if env and isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, list) or not all(isinstance(v, str) and _NAME.match(v.strip()) for v in value):
        raise ValueError(f"{value!r} is not a list of backend names")
    return [v.strip() for v in value]


def _selector(value: Any, env: bool) -> str:
    text = _str(value, env)
    parse_selector(text)  # raises ConfigError with examples; re-raised with the source below
    return text


def _limit(value: Any, env: bool) -> int | str | None:
    if env and isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return parse_memory_limit(value)


def _scalar(value: Any, env: bool) -> Any:
    if env and isinstance(value, str):
        return _literal(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"{value!r} is not a string, number or boolean")


def _literal(text: str) -> Any:
    """An environment value read as a TOML literal (``3``, ``true``, ``"x"``) when it is one, else as text."""
    try:
        return _toml().loads(f"v = {text}")["v"]
    except Exception:
        return text


@dataclass(frozen=True)
class _Key:
    parse: Callable[[Any, bool], Any]
    allowed: str


#: Every section and key with its parser and the allowed values (``bench`` is a table of scalars).
SCHEMA: dict[str, dict[str, _Key]] = {
    "backend": {
        "default": _Key(_selector, 'a selector: "auto", "cpu", "cuda", "cuda:1", "opencl:pocl:0", "webgpu"'),
        "order": _Key(_names, 'a list of backend names, e.g. ["cuda", "opencl", "cpu"]'),
    },
    "memory": {
        "persistent_memory": _Key(_choice("enabled", "disabled", "enforced"), "enabled, disabled, enforced"),
        "limit": _Key(_limit, 'bytes (int), a size ("512MiB", "2GB"), a share ("80%") or "none"'),
        "guard": _Key(_bool, "true, false"),
    },
    "streaming": {
        "max_streams": _Key(_stream_count, f"a positive integer up to {MAX_STREAMS}"),
        "policy": _Key(_choice("per-thread", "single"), "per-thread, single"),
    },
    "autotune": {
        "level": _Key(
            _choice("minimal", "balanced", "extensive", "full"), "minimal, balanced, extensive, full"
        ),
        "cache": _Key(_bool, "true, false"),
        "bench": _Key(_scalar, "a table of strings, numbers or booleans"),
    },
    "compilation": {
        "cache": _Key(_bool, "true, false"),
        "check_mode": _Key(_choice("checked", "unchecked"), "checked, unchecked"),
    },
    "profiling": {"level": _Key(_choice("disabled", "basic", "full"), "disabled, basic, full")},
    "logging": {"level": _Key(_choice("warning", "info", "debug"), "warning, info, debug")},
}
_TABLES = {"autotune.bench"}
SECTIONS = (*SCHEMA, "backends")


def _defaults() -> dict[str, Any]:
    cfg = Config()
    flat: dict[str, Any] = {}
    for section, keys in SCHEMA.items():
        for key in keys:
            if f"{section}.{key}" not in _TABLES:
                flat[f"{section}.{key}"] = getattr(getattr(cfg, section), key)
    return flat


# ---------------------------------------------------------------------------------------- layers
def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    import tomli  # pragma: no cover - Python 3.10

    return tomli  # pragma: no cover


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML file; malformed TOML or an unreadable file is a ConfigError naming the file."""
    try:
        with open(path, "rb") as f:
            return dict(_toml().load(f))
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", source=str(path)) from exc
    except Exception as exc:  # tomllib.TOMLDecodeError and tomli's
        raise ConfigError(f"malformed TOML: {exc}", source=str(path)) from exc


def _bad(source: str, dotted: str, exc: Exception, allowed: str) -> ConfigError:
    return ConfigError(f"bad value for {dotted}: {exc}", source=source, key=dotted, allowed=allowed)


def flatten(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Validate a config table (a file's sections) into dotted keys -> typed values."""
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown section [{section}]", source=source, key=section, allowed=", ".join(SECTIONS)
            )
        if not isinstance(body, dict):
            raise ConfigError(f"[{section}] must be a table", source=source, key=section)
        if section == "backends":
            for name, options in body.items():
                if not isinstance(options, dict):
                    raise ConfigError(
                        f"[backends.{name}] must be a table of backend options", source=source,
                        key=f"backends.{name}",
                    )  # fmt: skip
                for key, value in options.items():
                    flat[f"backends.{name}.{key}"] = value
            continue
        keys = SCHEMA[section]
        for key, value in body.items():
            dotted = f"{section}.{key}"
            spec = keys.get(key)
            if spec is None:
                raise ConfigError(
                    f"unknown key {dotted!r}", source=source, key=dotted, allowed=", ".join(keys)
                )
            if dotted in _TABLES:
                if not isinstance(value, dict):
                    raise ConfigError(
                        f"{dotted} must be a table", source=source, key=dotted, allowed=spec.allowed
                    )
                for sub, item in value.items():
                    flat[f"{dotted}.{sub}"] = _parse(spec, item, False, source, f"{dotted}.{sub}")
            else:
                flat[dotted] = _parse(spec, value, False, source, dotted)
    return flat


def _parse(spec: _Key, value: Any, env: bool, source: str, dotted: str) -> Any:
    try:
        return spec.parse(value, env)
    except ConfigError as exc:
        raise ConfigError(
            f"bad value for {dotted}: {exc}", source=source, key=dotted, allowed=spec.allowed
        ) from exc
    except (ValueError, TypeError) as exc:
        raise _bad(source, dotted, exc, spec.allowed) from exc


def env_layer(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    """Dotted key -> (value, variable) from ``CUBEPLUG_<SECTION>_<KEY>`` variables; empty ones are unset."""
    out: dict[str, tuple[Any, str]] = {}
    for var in sorted(env):
        value = env[var]
        if not var.startswith("CUBEPLUG_") or value == "":
            continue
        section, _, rest = var[len("CUBEPLUG_") :].partition("_")
        section, rest = section.lower(), rest.lower()
        if section not in SECTIONS or not rest:
            continue  # CUBEPLUG_BACKEND, CUBEPLUG_DISABLE, ...: not config keys
        source = f"environment variable {var}"
        if section == "backends":
            name, _, key = rest.partition("_")
            if not key:
                raise ConfigError(
                    f"{var} names no option; use CUBEPLUG_BACKENDS_<NAME>_<KEY>", source=source, key=var
                )
            out[f"backends.{name}.{key}"] = (_literal(value), var)
            continue
        keys = SCHEMA[section]
        table = next((t for t in keys if f"{section}.{t}" in _TABLES and rest.startswith(t + "_")), None)
        if table is not None:
            dotted = f"{section}.{table}.{rest[len(table) + 1 :]}"
            out[dotted] = (_parse(keys[table], value, True, source, dotted), var)
            continue
        if rest not in keys or f"{section}.{rest}" in _TABLES:
            raise ConfigError(
                f"unknown key {section}.{rest!s} in {var}", source=source, key=f"{section}.{rest}",
                allowed=", ".join(f"CUBEPLUG_{section.upper()}_{k.upper()}" for k in keys),
            )  # fmt: skip
        dotted = f"{section}.{rest}"
        out[dotted] = (_parse(keys[rest], value, True, source, dotted), var)
    return out


def find_project_file(cwd: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest ``cubeplug.toml``, or ``pyproject.toml`` with ``[tool.cubeplug]``, and its table."""
    for folder in (cwd, *cwd.parents):
        own = folder / "cubeplug.toml"
        if own.is_file():
            return own, read_toml(own)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            table = read_toml(pyproject).get("tool", {}).get("cubeplug")
            if isinstance(table, dict):
                return pyproject, table
    return None


def user_config_path() -> Path:
    """The user config file: ``platformdirs.user_config_dir("cubeplug")/cubeplug.toml``."""
    import platformdirs

    return Path(platformdirs.user_config_dir("cubeplug")) / "cubeplug.toml"


# ---------------------------------------------------------------------------------------- loading
def load_config(
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    user_path: str | os.PathLike[str] | None = None,
) -> EffectiveConfig:
    """Load the effective configuration from defaults, the user file, the project file and the environment."""
    env = os.environ if env is None else env
    values = _defaults()
    origins = dict.fromkeys(values, DEFAULT)
    files: list[str] = []
    upath = Path(user_path) if user_path is not None else user_config_path()
    if upath.is_file():
        files.append(str(upath))
        _merge(values, origins, flatten(read_toml(upath), str(upath)), Origin("user", str(upath)))
    project = find_project_file(Path(cwd) if cwd is not None else Path.cwd())
    notes: list[str] = []
    if project is not None:
        path, table = project
        where = str(path) if path.name == "cubeplug.toml" else f"{path} [tool.cubeplug]"
        files.append(where)
        _merge(values, origins, flatten(table, where), Origin("project", where))
        sibling = path.with_name("pyproject.toml")
        if path.name == "cubeplug.toml" and sibling.is_file():
            notes.append(f"{path} takes precedence over any [tool.cubeplug] in {sibling}")
    for dotted, (value, var) in env_layer(env).items():
        values[dotted] = value
        origins[dotted] = Origin("env", var)
    return EffectiveConfig(build(values), origins, values, tuple(files), tuple(notes))


def _merge(values: dict[str, Any], origins: dict[str, Origin], layer: dict[str, Any], origin: Origin) -> None:
    for dotted, value in layer.items():
        values[dotted] = value
        origins[dotted] = origin


def build(values: Mapping[str, Any]) -> Config:
    """The typed Config from validated dotted keys."""
    cfg = Config()
    for dotted, value in values.items():
        parts = dotted.split(".")
        if parts[0] == "backends":
            cfg.backends.setdefault(parts[1], {})[".".join(parts[2:])] = value
        elif len(parts) == 3:
            getattr(getattr(cfg, parts[0]), parts[1])[parts[2]] = value
        else:
            setattr(getattr(cfg, parts[0]), parts[1], list(value) if isinstance(value, list) else value)
    return cfg


def with_overrides(
    eff: EffectiveConfig, overrides: Mapping[str, Any], kind: str = "argument"
) -> EffectiveConfig:
    """A copy of ``eff`` with overrides: ``{"memory": {"limit": "1GiB"}}`` or ``{"memory_limit": 1}``."""
    table: dict[str, Any] = {}
    for name, value in overrides.items():
        if name in SECTIONS and isinstance(value, dict):
            table.setdefault(name, {}).update(value)
        else:
            section, _, key = name.partition("_")
            if not key:
                raise ConfigError(
                    f"bad override {name!r}; use section_key=value", key=name, allowed=", ".join(SECTIONS)
                )
            table.setdefault(section, {})[key] = value
    layer = flatten(table, kind)
    values, origins = dict(eff.values), dict(eff.origins)
    _merge(values, origins, layer, Origin(kind))
    return EffectiveConfig(build(values), origins, values, eff.files, eff.notes)


# ---------------------------------------------------------------------------------------- per process
_lock = threading.Lock()
_cached: EffectiveConfig | None = None


def effective_config() -> EffectiveConfig:
    """The process-wide effective configuration, loaded once from the working directory and environment."""
    global _cached
    eff = _cached
    if eff is None:
        with _lock:
            if _cached is None:
                _cached = load_config()
            eff = _cached
    return eff


def get_config() -> Config:
    """The process-wide typed configuration."""
    return effective_config().config


def reload_config() -> EffectiveConfig:
    """Load the configuration again (after changing files, variables or directory)."""
    reset_config()
    return effective_config()


def reset_config() -> None:
    """Forget the cached configuration; the next use loads it again (for tests)."""
    global _cached
    with _lock:
        _cached = None
