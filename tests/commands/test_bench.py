"""``cubeplug bench``: sections, JSON, the plot, the autotune check, and backends measured for real."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cubeplug import cli
from cubeplug.registry import selection
from tests.std.conftest import skip_reason

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.core.tune import reset_persistent_caches

    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path / "cache"))
    reset_persistent_caches()


def _bench(tmp_path: Path, *args: str, status: int = 0) -> dict[str, Any]:
    out = tmp_path / "bench.json"
    assert cli.main(["--plain", "bench", *args, "--json", str(out)]) == status
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["ok"] is (status == 0) and bool(doc["failures"]) is (status != 0)
    return doc


def test_cpu_sections_with_ratios(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _bench(
        tmp_path,
        "--backend",
        "cpu",
        "--quick",
        "--only",
        "launch",
        "--only",
        "alloc",
        "--only",
        "bandwidth",
        "--only",
        "reduce_sum",
        "--only",
        "matmul",
    )
    assert doc["quick"] is True and doc["versions"]["numpy"] != "-" and "date" in doc
    cpu = doc["backends"]["cpu"]
    assert cpu["device"]["backend"] == "cpu" and cpu["library"].startswith("numpy")
    assert cpu["launch"]["ratio_launch_us_cubeplug_over_raw"] > 0
    assert cpu["alloc"]["ratio_us_cubeplug_over_raw"] > 0
    sizes = [entry["bytes"] for entry in cpu["bandwidth"]]
    assert sizes == cpu["plan"]["sizes"]
    first = cpu["bandwidth"][0]
    assert first["upload_pageable"]["ratio_gbps_cubeplug_over_raw"] > 0 and first["copy"]["cubeplug_gbps"] > 0
    assert first["upload_staged"]["cubeplug_gbps"] is None  # the cpu backend has no pinned staging
    red, mm = cpu["reduce_sum"], cpu["matmul"]
    assert red["relative_error"] < 1e-5 and red["chosen"] and red["ratio_time_cubeplug_over_baseline"] > 0
    assert red["ratio_read_gbps_over_copy_peak_gbps"] > 0 and red["baseline"] == "numpy.sum"
    assert mm["max_abs_error"] < 1e-3 and mm["ratio_tflops_cubeplug_over_baseline"] > 0
    table = capsys.readouterr().out
    assert "launch (us)" in table and "reduce_sum" in table and "matmul" in table
    rounds = cpu["plan"]["repeats"]
    for section, key in (
        (cpu["launch"], "ratio_launch_us_cubeplug_over_raw"),
        (cpu["launch"], "ratio_launch_unchecked_us_cubeplug_over_raw"),
        (cpu["alloc"], "ratio_us_cubeplug_over_raw"),
        (first["copy"], "ratio_gbps_cubeplug_over_raw"),
        (red, "ratio_time_cubeplug_over_baseline"),
        (mm, "ratio_tflops_cubeplug_over_baseline"),
    ):  # every paired ratio keeps its spread, and the median lies inside it
        spread = section[f"spread_{key}"]
        assert spread["rounds"] == rounds and spread["min"] <= spread["iqr"][0] <= section[key]
        assert section[key] <= spread["iqr"][1] <= spread["max"]
    launch_row = next(line for line in table.splitlines() if line.startswith("launch (us)"))
    cell = launch_row.rstrip().rsplit(" ", 1)[-1]
    assert cell.startswith("[") and cell.endswith("]") and "-" in cell  # the table shows the IQR


def test_autotune_check_on_cpu(tmp_path: Path) -> None:
    doc = _bench(
        tmp_path,
        "--backend",
        "cpu",
        "--only",
        "autotune",
        "--autotune-check",
        "--reduce-n",
        "50000",
        "--matmul-size",
        "48",
    )
    checks = doc["backends"]["cpu"]["autotune_check"]
    assert [c["op"] for c in checks] == ["reduce_sum", "matmul"]
    for check in checks:
        assert check["second_process_reused"], check
        assert check["second_process"]["benchmark_runs"] == 0
        assert check["chosen"] in check["exhaustive_ms"]
        assert check["ratio_chosen_over_exhaustive_best_median"] >= 1.0


def test_plot_needs_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    png = tmp_path / "bw.png"
    assert (
        cli.main(
            ["--plain", "bench", "--backend", "cpu", "--quick", "--only", "bandwidth", "--plot", str(png)]
        )
        == 0
    )
    assert "matplotlib is not installed" in capsys.readouterr().out and not png.exists()


def test_plot_is_written_when_matplotlib_is_there(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from cubeplug.bench.report import plot

    doc = _bench(tmp_path, "--backend", "cpu", "--quick", "--only", "bandwidth", "--only", "launch")
    png = tmp_path / "bw.png"
    assert plot(png, doc) == f"plot written to {png}" and png.stat().st_size > 1000
    from cubeplug.bench.report import lines

    shown = [line.label for line in lines(doc["backends"]["cpu"])]
    assert shown[:2] == ["launch (us)", "launch unchecked (us)"]  # ratios beside bandwidth


def test_a_section_that_fails_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cubeplug.bench.suite import BackendBench

    def broken(self: Any) -> Any:
        raise RuntimeError("no luck")

    monkeypatch.setattr(BackendBench, "alloc", broken)
    doc = _bench(tmp_path, "--backend", "cpu", "--quick", "--only", "alloc", "--only", "launch", status=1)
    assert doc["backends"]["cpu"]["alloc"] == {"error": "RuntimeError: no luck"}
    assert "cubeplug_launch_us" in doc["backends"]["cpu"]["launch"]
    assert doc["failures"] == ["cpu: alloc: RuntimeError: no luck"]
    assert "1 figure(s) failed" in capsys.readouterr().err


def test_a_backend_whose_kernels_do_not_compile_fails_the_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cubeplug.backends.cpu.server import CpuServer
    from cubeplug.core.errors import CompileError

    def cannot(self: Any, kernel: Any, dialect: str, mode: Any) -> Any:
        raise CompileError("error: unknown target CPU 'generic'", backend="cpu", kernel=kernel.name)

    monkeypatch.setattr(CpuServer, "compile", cannot)
    selection.reset()  # no cached client with kernels compiled before
    try:
        doc = _bench(
            tmp_path, "--backend", "cpu", "--quick", "--only", "launch", "--only", "reduce_sum", status=1
        )
    finally:
        selection.reset()
    assert len(doc["failures"]) == 2 and all("unknown target CPU" in f for f in doc["failures"])
    err = capsys.readouterr().err
    assert "2 figure(s) failed" in err and "cpu: launch: CompileError" in err


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_gpu_library_backends_for_real(tmp_path: Path, backend: str) -> None:
    reason = skip_reason(backend)
    if reason is not None:
        pytest.skip(reason)
    doc = _bench(
        tmp_path,
        "--backend",
        backend,
        "--quick",
        "--only",
        "launch",
        "--only",
        "alloc",
        "--only",
        "bandwidth",
        "--only",
        "reduce_sum",
        "--reduce-n",
        "100000",
    )
    result = doc["backends"][backend]
    assert result["launch"]["raw_launch_us"] > 0 and result["alloc"]["raw_us"] > 0
    assert all(entry["copy"]["raw_gbps"] > 0 for entry in result["bandwidth"])
    assert result["reduce_sum"]["relative_error"] < 1e-5 and result["reduce_sum"]["copy_peak_gbps"] > 0


def test_all_lists_usable_backends() -> None:
    from cubeplug.bench.clients import usable_backends

    names = usable_backends()
    assert "cpu" in names
    for name in ("opencl", "webgpu"):
        assert (name in names) == (skip_reason(name) is None)


def test_importing_std_tune_and_bench_imports_no_gpu_library() -> None:
    code = (
        "import sys, json, cubeplug.std, cubeplug.core.tune, cubeplug.bench, cubeplug.commands.cache; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'pyopencl', 'wgpu'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
