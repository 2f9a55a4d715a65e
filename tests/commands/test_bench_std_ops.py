"""``cubeplug bench --ops``: every std op measured for real on cpu (against NumPy), PoCL and lavapipe
(no library, no CUDA of the same device: no yardstick), with small sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cubeplug import cli
from cubeplug.bench.clients import is_gpu
from cubeplug.bench.std_cases import OPS
from tests.std.conftest import make_client, skip_reason

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")

#: Every row the bench makes of the ops (matmul f16 is measured or skipped with its reason).
ROWS = ["fill", "copy", "axpy", "reduce_sum", "reduce max", "argmax", "reduce_axis sum axis=0",
        "reduce_axis sum axis=1", "scan inclusive sum", "transpose", "map a * b + a (2 inputs)", "matmul",
        "matmul"]  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.core.tune import reset_persistent_caches

    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path / "cache"))
    reset_persistent_caches()


def _bench_ops(tmp_path: Path, backend: str) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path / "bench.json"
    args = [
        "--plain",
        "bench",
        "--backend",
        backend,
        "--quick",
        "--ops",
        ",".join(OPS),
        "--ops-n",
        "20000",
        "--matmul-size",
        "32",
        "--json",
        str(out),
    ]
    assert cli.main(args) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["ok"] is True and doc["failures"] == []
    result = doc["backends"][backend]
    # --ops without --only measures that section alone
    assert "launch" not in result and "reduce_sum" not in result and result["bandwidth"] == []
    return doc, result["std_ops"]


def _measured(row: dict[str, Any]) -> None:
    assert row["cubeplug_ms"] > 0 and row["first_call_s"] >= 0, row
    rate = row["cubeplug_tflops"] if row["unit"] == "TFLOP/s" else row["cubeplug_gbps"]
    assert rate > 0, row


def test_cpu_rows_against_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, section = _bench_ops(tmp_path, "cpu")
    assert section["n"] == 20000 and section["side"] == 141 and section["library"] == "numpy"
    rows = section["rows"]
    assert [r["row"] for r in rows] == ROWS
    measured = [r for r in rows if "skipped" not in r]
    assert {r["op"] for r in measured} == set(OPS)
    for row in measured:
        _measured(row)
        assert row["raw_call"].startswith("numpy") and row["raw_ms"] > 0
        spread = row["spread_ratio_time_cubeplug_over_raw"]
        assert spread["rounds"] == doc["backends"]["cpu"]["plan"]["repeats"]
        assert spread["min"] <= row["ratio_time_cubeplug_over_raw"] <= spread["max"]
        assert "yardstick" not in row  # NumPy is the cpu backend's own library
    transpose = next(r for r in rows if r["op"] == "transpose")
    assert transpose["copy_peak_gbps"] > 0 and transpose["ratio_gbps_over_copy_peak"] > 0
    table = capsys.readouterr().out
    assert "std scan inclusive sum f32 20000" in table and "vs numpy.cumsum" in table


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_pocl_and_lavapipe_rows_have_no_yardstick(tmp_path: Path, backend: str) -> None:
    reason = skip_reason(backend)
    if reason is not None:
        pytest.skip(reason)
    _, section = _bench_ops(tmp_path, backend)
    rows = section["rows"]
    assert [r["row"] for r in rows] == ROWS and section["library"] is None
    # every row is measured but the f16 matmul, where the device does not declare f16
    assert all("skipped" not in r for r in rows if r["dtype"] != "f16"), rows
    for row in rows:
        if "skipped" in row:
            continue
        _measured(row)
        assert row["raw_call"] is None and "ratio_time_cubeplug_over_raw" not in row
        # a CPU device: this run benched no cuda device of that name, and the row says so
        assert row["yardstick"] is None and "no yardstick" in row["yardstick_note"]
        # and no device-timed pass ran for a yardstick that is not in the run (lavapipe has timers)
        assert "cubeplug_device_ms" not in row


def test_a_cpu_device_gets_no_device_pass_beside_cuda(tmp_path: Path) -> None:
    # cuda in the run makes the yardstick's device pass run, but only for GPUs: a CPU device's name
    # never matches the CUDA GPU's. Here cuda fails to load or runs; lavapipe is the CPU device.
    reason = skip_reason("webgpu")
    if reason is not None:
        pytest.skip(reason)
    client = make_client("webgpu")
    try:
        if is_gpu(client):
            pytest.skip("webgpu drives a GPU here: its device pass is the yardstick's")
    finally:
        client.close()
    out = tmp_path / "bench.json"
    args = ["--plain", "bench", "--backend", "cuda", "--backend", "webgpu", "--quick", "--ops", "fill",
            "--ops-n", "20000", "--json", str(out)]
    cli.main(args)  # 1 where cuda cannot load: its own error, beside webgpu's rows
    rows = json.loads(out.read_text())["backends"]["webgpu"]["std_ops"]["rows"]
    assert rows and all("cubeplug_ms" in r and "cubeplug_device_ms" not in r for r in rows), rows


def test_an_unknown_op_is_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--plain", "bench", "--backend", "cpu", "--ops", "fill,cumsum"]) == 2
    err = capsys.readouterr().err
    assert "--ops: unknown op(s) cumsum; choose from fill, copy" in err


def test_a_raw_library_that_does_not_load_is_reported_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cubeplug.bench import baselines

    def missing(client: Any) -> Any:
        raise ImportError("No module named 'numpy_raw'")

    monkeypatch.setitem(baselines.BASELINES, "cpu", missing)
    out = tmp_path / "bench.json"
    args = [
        "--plain",
        "bench",
        "--backend",
        "cpu",
        "--ops",
        "reduce_sum,scan",
        "--ops-n",
        "5000",
        "--json",
        str(out),
    ]
    assert cli.main(args) == 1
    doc = json.loads(out.read_text())
    assert doc["failures"] == ["cpu: raw library: ImportError: No module named 'numpy_raw'"]
    rows = doc["backends"]["cpu"]["std_ops"]["rows"]
    assert [r["row"] for r in rows] == ["reduce_sum", "scan inclusive sum"]
    for row in rows:
        assert row["cubeplug_ms"] > 0 and row["raw_call"] is None and "raw_ms" not in row
        assert "ratio_time_cubeplug_over_raw" not in row and "numpy_raw" in row["raw_note"]


@pytest.mark.gpu
def test_cuda_rows_against_cupy_and_the_yardstick_of_opencl_and_webgpu(tmp_path: Path) -> None:
    """On the GPU machine: CuPy's figures on cuda; NVIDIA OpenCL and Vulkan rows beside the CUDA
    figure of the same GPU."""
    reason = skip_reason("cuda")
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "bench.json"
    args = [
        "--plain",
        "bench",
        "--backend",
        "cuda",
        "--backend",
        "opencl:nvidia:0",
        "--backend",
        "webgpu",
        "--quick",
        "--ops",
        ",".join(OPS),
        "--ops-n",
        "1000000",
        "--matmul-size",
        "256",
        "--json",
        str(out),
    ]
    assert cli.main(args) == 0
    backends = json.loads(out.read_text())["backends"]
    cuda, opencl, webgpu = backends["cuda"], backends["opencl:nvidia:0"], backends["webgpu"]
    assert cuda["std_ops"]["library"] == "cupy"
    for row in cuda["std_ops"]["rows"]:
        if "skipped" not in row:
            assert row["raw_call"].startswith("cupy") and row["ratio_time_cubeplug_over_raw"] > 0, row
    for other in (opencl, webgpu):
        assert other["device"]["name"] == cuda["device"]["name"], "the same GPU on all three backends"
        for row in other["std_ops"]["rows"]:
            if "skipped" not in row:
                assert (
                    row["yardstick"]["backend"] == "cuda" and row["yardstick"]["ratio_time_over_cuda"] > 0
                ), row
    # cuda is in the run: a backend timed on the host whose device has timers gets the device pass
    if webgpu["device"]["device_timing"] and webgpu["timing"]["cubeplug"] == "host":
        for row in webgpu["std_ops"]["rows"]:
            if "skipped" not in row:
                assert row["yardstick"]["ratio_device_time_over_cuda"] > 0, row
