"""The ``cubeplug`` command: list, doctor, the subcommand registry, and what it imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import cubeplug
from cubeplug import cli
from tests.plugins import fixtures
from tests.plugins.distributions import install
from tests.plugins.fixtures import Installer

site = fixtures.site
ROOT = Path(cubeplug.__file__).resolve().parents[1]
GPU_MODULES = ("cupy", "pyopencl", "wgpu", "cuda")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_list_plain_does_not_import_plugins(site: Installer, capsys: pytest.CaptureFixture[str]) -> None:
    site("good", "broken", "slow")
    code, out = run(capsys, "--plain", "list")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[3:] if line.strip()}
    assert "not probed" in lines["cpu"] and "cubeplug-dummy-good==1.0" in lines["dummygood"]
    assert "not probed" in lines["dummyslow"]
    assert "cubeplug_dummy_good" not in sys.modules and "cubeplug_dummy_slow" not in sys.modules


def test_list_probe_shows_every_status(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good", "broken", "oldapi", "hookraise")
    fixtures.disable(monkeypatch, "dummyraise")
    code, out = run(capsys, "list", "--probe", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["cpu"]["status"] == "ok"
    assert rows["dummygood"]["status"] == "ok" and rows["dummygood"]["dist"] == "cubeplug-dummy-good==1.0"
    assert rows["dummybroken"]["status"] == "failed" and "ImportError" in rows["dummybroken"]["reason"]
    assert rows["dummyold"]["status"] == "failed" and "API version 0" in rows["dummyold"]["reason"]
    assert rows["dummyraise"]["status"] == "blocked" and "CUBEPLUG_DISABLE" in rows["dummyraise"]["reason"]
    code, out = run(capsys, "list", "--probe")  # rich or plain: the same words
    assert "dummybroken" in out and "failed" in out and "blocked" in out


def test_list_probe_unavailable_and_strict_exit_status(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good", "broken")
    monkeypatch.setenv("DUMMY_UNAVAILABLE", "1")
    code, out = run(capsys, "list", "--probe", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["dummygood"]["status"] == "unavailable"
    assert rows["dummygood"]["reason"] == "no dummy device here"
    monkeypatch.setenv("CUBEPLUG_STRICT_PLUGINS", "1")
    cubeplug.registry.selection.reset()
    code, _ = run(capsys, "list", "--probe", "--json")
    assert code == 1


def test_doctor_json(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    site("good")
    monkeypatch.setenv("CUBEPLUG_LOGGING_LEVEL", "info")
    monkeypatch.setenv("CUBEPLUG_BACKEND", "cpu")
    cubeplug.registry.selection.reset()
    code, out = run(capsys, "doctor", "--json", "--backend", "cpu")
    assert code == 0
    report = json.loads(out)
    assert report["versions"]["cubeplug"] == cubeplug.__version__
    values = {v["key"]: v for v in report["config"]["values"]}
    assert values["logging.level"] == {
        "key": "logging.level",
        "value": "info",
        "origin": "env CUBEPLUG_LOGGING_LEVEL",
    }
    assert values["memory.limit"]["origin"] == "default"
    assert report["environment"]["CUBEPLUG_BACKEND"] == "cpu"
    assert {e["name"] for e in report["entry points"]} >= {"cpu", "dummygood"}
    cpu = report["backends"]["cpu"]
    assert list(report["backends"]) == ["cpu"]
    assert cpu["status"] == "ok" and cpu["client"]["device"]["backend"] == "cpu"
    assert "capabilities" in cpu["client"] and "memory usage" in cpu["client"]
    assert "cache" in report["cache directories"]
    home = str(Path.home())
    if home not in ("", "/"):
        assert home not in out


def test_doctor_plugin_sections_and_human_output(site: Installer, capsys: pytest.CaptureFixture[str]) -> None:
    site("good")
    code, out = run(capsys, "--plain", "doctor", "--backend", "dummygood")
    assert code == 0
    for heading in (
        "versions",
        "effective config",
        "CUBEPLUG_* variables",
        "entry points",
        "backend dummygood",
    ):
        assert heading in out
    assert "dummy section" in out and "asked about: dummygood" in out


def test_doctor_never_crashes(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site("broken", "slow", "hookraise")
    project = tmp_path / "project"
    project.mkdir()
    (project / "cubeplug.toml").write_text("[memory\n")
    monkeypatch.chdir(project)
    cubeplug.registry.selection.reset()
    code, out = run(capsys, "doctor", "--json", "--timeout", "1.5")
    assert code == 1  # a broken config file is a failure, whatever else works
    report = json.loads(out)
    assert "malformed TOML" in report["config"]["error"]
    assert "malformed TOML" in report["selection"]["error"]  # the child's error, not its traceback
    assert "Traceback" not in json.dumps(report["selection"])
    backends = report["backends"]
    assert "simulated missing dependency" in backends["dummybroken"]["cause"]
    assert "TimeoutExpired" in backends["dummyslow"]["error"]
    assert "error" in backends["cpu"].get("client", {}) or backends["cpu"]["status"] == "ok"
    (project / "cubeplug.toml").unlink()
    cubeplug.registry.selection.reset()
    code, out = run(capsys, "--plain", "doctor", "--backend", "dummyraise", "--timeout", "30")
    assert code == 0 and "boom in cubeplug_compute_storage" in out


def test_subcommand_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cubeplug_fake_bench.py").write_text(
        "def add_arguments(parser):\n    parser.add_argument('--n', type=int, default=1)\n"
        "def run(args):\n    print('bench', args.n)\n    return 7\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "bench", cli.LazyCommand("cubeplug_fake_bench", "run benchmarks"))
    code, out = run(capsys, "list", "--json")
    assert "cubeplug_fake_bench" not in sys.modules  # only the chosen command's module is imported
    code, out = run(capsys, "bench", "--n", "3")
    assert (code, out) == (7, "bench 3\n")
    code, out = run(capsys)
    assert code == 0 and "bench" in out and "doctor" in out
    monkeypatch.delitem(sys.modules, "cubeplug_fake_bench")


def _probe_imports(site_dir: Path, code: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site_dir), str(ROOT)])}
    env = {k: v for k, v in env.items() if not k.startswith("CUBEPLUG_")}
    script = (
        "import sys, json, time\nt0 = time.perf_counter()\n"
        f"{code}\n"
        "elapsed = time.perf_counter() - t0\n"
        "mods = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{GPU_MODULES!r} or m.startswith('cubeplug.backends.') or m.startswith('cubeplug_dummy'))\n"
        "print(json.dumps({'modules': mods, 'seconds': elapsed, 'pluggy': 'pluggy' in sys.modules, "
        "'rich': 'rich' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_import_and_list_import_no_backend_and_no_gpu_library(tmp_path: Path) -> None:
    site_dir = install(tmp_path / "site", "good", "broken", "slow", "oldapi", "hookraise")
    result = _probe_imports(site_dir, "import cubeplug")
    assert result["modules"] == [] and result["pluggy"] is False and result["rich"] is False
    result = _probe_imports(site_dir, "from cubeplug.cli import main\nmain(['--plain', 'list'])")
    assert result["modules"] == []
    assert result["seconds"] < 3.0  # the slow plugin (3 s at import) is never imported


def test_python_dash_m(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUBEPLUG_")}
    env["PYTHONPATH"] = str(ROOT)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "cubeplug", "--plain", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert "cpu" in out.stdout and time.perf_counter() - start < 10
    out = subprocess.run(
        [sys.executable, "-m", "cubeplug", "--version"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0 and cubeplug.__version__ in out.stdout


def test_doctor_runs_no_module_of_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "json.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('json.py ran')\n"
        "raise SystemExit('a json.py of the working directory was imported')\n"
    )
    command = Path(sys.executable).with_name("cubeplug")
    if not command.exists():
        pytest.skip(f"the cubeplug command is not installed next to {sys.executable}")
    proc = subprocess.run(
        [str(command), "doctor", "--json", "--backend", "cpu", "--timeout", "120"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "ran").exists()
    report = json.loads(proc.stdout)
    assert report["backends"]["cpu"]["status"] == "ok", report["backends"]["cpu"]


def test_doctor_reads_cleanly(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DUMMY_UNAVAILABLE", "1")
    site("good")
    code, out = run(capsys, "--plain", "doctor", "--timeout", "60")
    assert code == 0
    assert "notes:" not in out  # no empty line for a config without notes
    assert "{'" not in out  # no raw dict: skipped backends are one line each
    assert "  dummygood: unavailable: no dummy device here" in out
    section = out.split("== backend dummygood ==")[1].split("== backend")[0]
    assert "memory properties" not in section and "report it to the authors" not in section


def test_doctor_exits_1_and_says_so_when_the_config_is_broken(
    site: Installer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "cubeplug.toml").write_text("[memory\n")
    monkeypatch.chdir(tmp_path)
    cubeplug.registry.selection.reset()
    assert cli.main(["--plain", "doctor", "--backend", "cpu", "--timeout", "60"]) == 1
    err = capsys.readouterr().err
    assert "the configuration cannot be read: ConfigError: malformed TOML" in err and "Fix it" in err
