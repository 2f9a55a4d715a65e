"""The std_ops rows of ``cubeplug bench``: sizes, op selection, yardsticks, the table, and a row that is
wrong or has no library (the backends measured for real are in tests/commands/test_bench_std_ops.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from cubeplug.bench import std_ops
from cubeplug.bench.report import std_lines
from cubeplug.bench.std_cases import OPS, Case, Inputs, cases
from cubeplug.bench.suite import BackendBench, plan_for
from tests.std.conftest import make_client, skip_reason


def test_sizes_follow_the_device_and_its_largest_buffer() -> None:
    assert std_ops.sizes(True, False, 1 << 40) == (256 << 20, 16384)
    assert std_ops.sizes(False, True, 1 << 40) == (1 << 20, 1024)
    assert std_ops.sizes(True, False, 256 << 20) == (64 << 20, 8192)  # 256 MiB buffers: 64M f32
    assert std_ops.sizes(False, True, 1 << 40, 10_000) == (10_000, 100)


def test_ops_are_parsed_in_order_and_unknown_names_are_refused() -> None:
    assert std_ops.parse_ops("scan, fill,scan") == ("scan", "fill")
    with pytest.raises(ValueError, match="unknown op.*sacn.*choose from fill, copy"):
        std_ops.parse_ops("fill,sacn")
    with pytest.raises(ValueError, match="none given"):
        std_ops.parse_ops(" , ")


def _row(row: str, ms: float, **extra: Any) -> dict[str, Any]:
    base = {"op": row, "row": row, "dtype": "f32", "shape": [1024], "unit": "GB/s", "cubeplug_ms": ms}
    return {**base, **extra}


def _cuda_row(row: str, ms: float, raw_ms: float) -> dict[str, Any]:
    return _row(row, ms, raw_call=f"cupy.{row}", raw_ms=raw_ms)


def _other_row(row: str, rounds: list[float]) -> dict[str, Any]:
    return _row(row, float(np.median(rounds)), cubeplug_rounds_ms=rounds, raw_call=None)


def _backend(backend: str, name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"device": {"backend": backend, "name": name}, "std_ops": {"rows": rows}}


def test_opencl_and_webgpu_rows_take_the_cuda_figure_of_the_same_gpu() -> None:
    gpu = "NVIDIA H100 80GB HBM3"
    backends = {
        "cuda": _backend("cuda", gpu, [_cuda_row("scan", 2.0, 1.6), _cuda_row("fill", 1.0, 1.0)]),
        "opencl": _backend("opencl", gpu, [_other_row("scan", [2.0, 2.2, 2.4]), _other_row("copy", [1.0])]),
        "webgpu": _backend("webgpu", "nvidia  h100 80gb hbm3", [_other_row("scan", [3.0, 4.0, 5.0])]),
    }
    std_ops.attach_yardsticks(backends)
    scan = backends["opencl"]["std_ops"]["rows"][0]["yardstick"]
    assert scan["backend"] == "cuda" and scan["cuda_ms"] == 2.0 and scan["ratio_time_over_cuda"] == 1.1
    assert scan["raw_call"] == "cupy.scan" and scan["ratio_time_over_raw"] == pytest.approx(
        2.2 / 1.6, abs=1e-4
    )
    spread = scan["spread_ratio_time_over_cuda"]
    assert (
        spread["paired"] is False and spread["min"] == 1.0 and spread["max"] == 1.2 and spread["rounds"] == 3
    )
    # cuda measured no copy row: no yardstick, and the note says why
    copied = backends["opencl"]["std_ops"]["rows"][1]
    assert copied["yardstick"] is None and "cuda has no figure of this row" in copied["yardstick_note"]
    # names compare without case or repeated spaces
    assert backends["webgpu"]["std_ops"]["rows"][0]["yardstick"]["ratio_time_over_cuda"] == 2.0
    assert "yardstick" not in backends["cuda"]["std_ops"]["rows"][0]  # cuda has its library


def test_a_device_time_compares_with_cuda_only_when_cuda_was_timed_on_the_device() -> None:
    gpu = "NVIDIA H200"
    webgpu_row = _other_row("scan", [3.0, 3.0, 3.0])
    webgpu_row.update(cubeplug_device_ms=2.5, cubeplug_device_best_ms=2.4)
    backends = {
        "cuda": {**_backend("cuda", gpu, [_cuda_row("scan", 2.0, 1.6)]), "timing": {"cubeplug": "device"}},
        "webgpu": _backend("webgpu", gpu, [webgpu_row]),
    }
    std_ops.attach_yardsticks(backends)
    yardstick = webgpu_row["yardstick"]
    assert yardstick["ratio_time_over_cuda"] == 1.5 and yardstick["ratio_device_time_over_cuda"] == 1.25
    host, device = std_lines(backends["webgpu"]["std_ops"])
    assert host.ratio == 1.5 and "device time vs cuda" in device.label and device.cells()[1:] == [
        "2.5",
        "2",
        "1.25",
    ]
    # a CUDA figure timed on the host is no yardstick for a device time
    webgpu_row.pop("yardstick")
    backends["cuda"]["timing"] = {"cubeplug": "host"}
    std_ops.attach_yardsticks(backends)
    assert webgpu_row["yardstick"]["ratio_device_time_over_cuda"] is None
    assert len(std_lines(backends["webgpu"]["std_ops"])) == 1


def test_a_backend_timed_on_the_host_reports_its_device_time_for_a_cuda_yardstick() -> None:
    reason = skip_reason("webgpu")
    if reason is not None:
        pytest.skip(reason)
    client = make_client("webgpu")
    try:
        if not client.capabilities.device_timing:
            pytest.skip(f"{client.device.name} has no timestamp queries")
        bench = BackendBench(client, None, plan_for(client, quick=True))
        assert not bench.device_timing  # no raw library with device timing: host time
        (case,) = [c for c in cases(Inputs(client, None, 4096, 64, 32), "fill") if c.dtype == "f32"]
        row = std_ops.measure(bench, None, case, device_pass=True)
        assert 0 < row["cubeplug_device_best_ms"] <= row["cubeplug_device_ms"]
        # without a CUDA yardstick in the run, no second (device-timed) pass
        row = std_ops.measure(bench, None, case)
        assert row["cubeplug_ms"] > 0 and "cubeplug_device_ms" not in row
    finally:
        client.close()


def test_the_device_pass_runs_only_when_the_run_benches_cuda() -> None:
    assert std_ops.cuda_in_run(["cuda", "opencl:nvidia:0", "webgpu"])
    assert std_ops.cuda_in_run(["webgpu", "CUDA:1"])
    assert not std_ops.cuda_in_run(["webgpu", "opencl", "cpu"])
    assert not std_ops.cuda_in_run([None])  # auto-selection alone: nothing to compare with
    assert not std_ops.cuda_in_run(["cuda:x:y:z", "webgpu"])  # a bad selector is that backend's error


def test_no_cuda_of_the_same_gpu_means_no_yardstick_not_another_figure() -> None:
    backends = {
        "cuda": _backend("cuda", "NVIDIA H200", [_cuda_row("scan", 2.0, 1.6)]),
        "opencl": _backend("opencl", "pthread-haswell-AMD EPYC", [_other_row("scan", [2.0])]),
    }
    std_ops.attach_yardsticks(backends)
    row = backends["opencl"]["std_ops"]["rows"][0]
    assert (
        row["yardstick"] is None
        and "no cuda device named 'pthread-haswell-AMD EPYC'" in row["yardstick_note"]
    )
    (line,) = std_lines(backends["opencl"]["std_ops"])
    assert line.label.endswith(": no yardstick") and line.theirs is None and line.ratio is None


def test_the_table_shows_library_yardstick_skipped_and_error_rows() -> None:
    gpu = "NVIDIA H100 80GB HBM3"
    cuda = _cuda_row("scan", 2.0, 1.6)
    cuda.update(
        cubeplug_gbps=1000.0,
        ratio_time_cubeplug_over_raw=1.25,
        spread_ratio_time_cubeplug_over_raw={"iqr": [1.2, 1.3], "min": 1.1, "max": 1.4, "rounds": 5},
    )
    backends = {
        "cuda": _backend(
            "cuda",
            gpu,
            [
                cuda,
                {
                    "op": "matmul",
                    "row": "matmul",
                    "dtype": "f16",
                    "shape": [64, 64, 64],
                    "skipped": "the device declares no f16",
                },
                {"op": "fill", "row": "fill", "dtype": "f32", "error": "AssertionError: x"},
            ],
        ),
        "opencl": _backend("opencl", gpu, [_other_row("scan", [2.0, 3.0])]),
    }
    std_ops.attach_yardsticks(backends)
    lines = std_lines(backends["cuda"]["std_ops"])
    assert [line.cells()[0] for line in lines] == [
        "std scan f32 1k (ms; 1000 GB/s) vs cupy.scan",
        "std matmul f16 64^3: skipped (the device declares no f16)",
        "std fill f32: error: AssertionError: x",
    ]
    assert lines[0].cells()[1:] == ["2", "1.6", "1.25 [1.2-1.3]"]
    (other,) = std_lines(backends["opencl"]["std_ops"])
    assert other.label.endswith("vs cuda (same GPU, unpaired)") and other.ratio == 1.25


@pytest.fixture(scope="module")
def cpu_bench() -> BackendBench:
    import cubeplug

    client = cubeplug.client("cpu")
    plan = plan_for(client, quick=True, matmul_n=32)
    return BackendBench(client, None, plan)


def test_a_wrong_result_is_the_rows_error_never_a_figure(cpu_bench: BackendBench) -> None:
    (fill,) = cases(Inputs(cpu_bench.client, None, 1000, 30, 32), "fill")
    wrong = dataclasses.replace(fill, check=lambda got: "3 of 1000 elements differ from NumPy's")
    with pytest.raises(AssertionError, match="fill f32 \\[1000\\] differs from NumPy: 3 of 1000"):
        std_ops.measure(cpu_bench, None, wrong)


def test_every_op_has_rows_and_the_checks_catch_a_wrong_result(cpu_bench: BackendBench) -> None:
    client = cpu_bench.client
    inputs = Inputs(client, None, 1000, 30, 32)
    for op in OPS:
        for case in cases(inputs, op):
            assert isinstance(case, Case) and case.op == op and case.theirs is None and case.raw_call is None
            if case.skipped:
                continue
            result = case.ours()
            assert case.check(result) is None, (case.row, case.check(result))
            handle = getattr(result, "handle", result)
            junk = np.full(handle.size // 4, 7e5, np.float32)  # no op here gives 7e5 everywhere
            if case.op == "argmax":
                junk = np.full(handle.size // 4, 5000, np.uint32)  # beyond n
            assert case.check(client.create(junk)) is not None, case.row


def test_without_a_library_the_row_says_so(cpu_bench: BackendBench) -> None:
    (scan,) = cases(Inputs(cpu_bench.client, None, 1000, 30, 32), "scan")
    row = std_ops.measure(cpu_bench, None, scan)
    assert (
        row["raw_call"] is None
        and "no array library" in row["raw_note"]
        and "ratio_time_cubeplug_over_raw" not in row
    )
    assert (
        row["cubeplug_ms"] > 0
        and row["cubeplug_gbps"] > 0
        and len(row["cubeplug_rounds_ms"]) == cpu_bench.plan.repeats
    )
