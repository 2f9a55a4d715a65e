"""Which raw library a backend's figures are measured against (its baseline in the same run).

The raw modules import their GPU library only when a baseline is made, so importing this one is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cubeplug.bench.raw import RawLibrary
from cubeplug.bench.raw_arrays import ArrayLibrary
from cubeplug.bench.raw_cuda import CupyArrays, CupyRaw
from cubeplug.bench.raw_numpy import NumpyRaw
from cubeplug.bench.raw_opencl import OpenCLRaw
from cubeplug.bench.raw_webgpu import WgpuRaw

#: The baseline of each backend: NumPy for the CPU reference backend, else the library it wraps.
BASELINES: dict[str, Callable[[Any], RawLibrary]] = {
    "cpu": NumpyRaw,
    "cuda": CupyRaw,
    "opencl": OpenCLRaw,
    "webgpu": WgpuRaw,
}


def raw_for(client: Any) -> RawLibrary | None:
    """The baseline of a client's backend (None for backends this bench has no raw baseline of)."""
    baseline = BASELINES.get(client.backend)
    return None if baseline is None else baseline(client)


def _numpy_arrays(raw: RawLibrary) -> ArrayLibrary:
    return ArrayLibrary()


def _cupy_arrays(raw: RawLibrary) -> ArrayLibrary:
    assert isinstance(raw, CupyRaw)
    return CupyArrays(raw)


#: The array library of each backend's std-op rows. OpenCL and WebGPU have none (PyOpenCL and wgpu
#: have no sum, cumsum or matmul): their yardstick is the CUDA figure of the same GPU in the same run.
ARRAYS: dict[str, Callable[[RawLibrary], ArrayLibrary]] = {"cpu": _numpy_arrays, "cuda": _cupy_arrays}


def arrays_for(client: Any, raw: RawLibrary | None) -> ArrayLibrary | None:
    """The array library the std ops of a client are measured against (None: there is none)."""
    make = ARRAYS.get(client.backend)
    return None if make is None or raw is None else make(raw)
