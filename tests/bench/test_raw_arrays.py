"""The array libraries of the std-op rows: NumPy, and CuPy's wrapper driven through a NumPy stand-in of
the few CuPy names it uses (CuPy itself is exercised by the gpu-marked bench test on the GPU machine)."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from cubeplug.bench.baselines import arrays_for
from cubeplug.bench.raw_arrays import ArrayLibrary
from cubeplug.bench.raw_cuda import CupyArrays
from cubeplug.bench.timing import Figure


class _Kernel:
    """``cupy.ElementwiseKernel`` on NumPy: the operation is also valid Python; outputs passed are written."""

    made: list[str] = []

    def __init__(self, ins: str, outs: str, operation: str, name: str) -> None:
        self.ins = [p.split()[-1] for p in ins.split(",")]
        self.outs = [p.split()[-1] for p in outs.split(",")]
        self.operation = operation
        _Kernel.made.append(name)

    def __call__(self, *args: Any) -> Any:
        env = dict(zip(self.ins + self.outs, args))
        exec(self.operation, {}, env)
        (out,) = self.outs
        if len(args) > len(self.ins):  # an output given: written in place, as CuPy does
            args[len(self.ins)][...] = env[out]
            return args[len(self.ins)]
        return env[out]


class _Pool:
    def __init__(self) -> None:
        self.freed = 0

    def free_all_blocks(self) -> None:
        self.freed += 1


def _fake_raw() -> Any:
    pool = _Pool()
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cp = types.SimpleNamespace(
        ElementwiseKernel=_Kernel,
        asarray=lambda a: np.array(a, copy=True),
        get_default_memory_pool=lambda: pool,
        cuda=types.SimpleNamespace(get_current_stream=lambda: stream),
        sum=np.sum,
    )
    timed: list[int] = []

    def events(run: Callable[[], object], iters: int, repeats: int) -> Figure:
        for _ in range(iters):
            run()
        timed.append(iters)
        return Figure(1e-3, 1e-3)

    return types.SimpleNamespace(cp=cp, dev=contextlib.nullcontext(), events=events, timed=timed, pool=pool)


def test_cupy_arrays_axpy_in_place_and_map_into_a_new_array() -> None:
    raw = _fake_raw()
    lib = CupyArrays(raw)
    assert lib.name == "cupy" and lib.xp is raw.cp
    x = lib.asarray(np.arange(4, dtype=np.float32))
    y = lib.asarray(np.ones(4, np.float32))
    axpy = lib.axpy(0.5, x, y)
    axpy()
    axpy()
    np.testing.assert_array_equal(y, 1 + 2 * 0.5 * np.arange(4, dtype=np.float32))
    z = lib.map2(x, y)()
    np.testing.assert_array_equal(z, x * y + x)
    assert _Kernel.made[-2:] == ["bench_axpy", "bench_map2"]
    made = len(_Kernel.made)
    lib.axpy(1.0, x, y)
    lib.map2(x, y)
    assert len(_Kernel.made) == made  # the kernels are made once per library, not per row
    # CUDA events time the library's side; close gives CuPy's pool back
    assert lib.time(lambda: None, 7, 1) == Figure(1e-3, 1e-3) and raw.timed == [7]
    lib.close()
    assert raw.pool.freed == 1


def test_numpy_arrays_axpy_in_place_and_map() -> None:
    lib = ArrayLibrary()
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    lib.axpy(2.0, x, y)()
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(lib.map2(x, y)(), x * y + x)
    assert lib.asarray(x) is x and lib.time(lambda: None, 3, 2).median >= 0


def test_each_backend_gets_its_array_library_or_none() -> None:
    def client(backend: str) -> Any:
        return types.SimpleNamespace(backend=backend)

    from cubeplug.bench.raw_cuda import CupyRaw

    cupy_raw = CupyRaw.__new__(CupyRaw)
    cupy_raw.cp, cupy_raw.dev = _fake_raw().cp, contextlib.nullcontext()
    assert type(arrays_for(client("cpu"), object())) is ArrayLibrary  # type: ignore[arg-type]
    assert isinstance(arrays_for(client("cuda"), cupy_raw), CupyArrays)
    assert arrays_for(client("opencl"), object()) is None  # type: ignore[arg-type]
    assert arrays_for(client("webgpu"), object()) is None  # type: ignore[arg-type]
    assert arrays_for(client("cuda"), None) is None  # CuPy did not load: no library, and no stand-in
