"""Kernel descriptions, scalar conversion, CubeCount and the compile cache."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import (
    DTYPES,
    Buffer,
    CompileCache,
    CubeCount,
    ExecutionMode,
    Kernel,
    Scalar,
    dtype_of,
    to_scalar,
)


def noop(launch, *args):  # type: ignore[no-untyped-def]
    return None


def make(**kw):  # type: ignore[no-untyped-def]
    args = dict(
        name="k",
        params=[Buffer("x", "f32", "read"), Scalar("a", "f32"), Buffer("y", "f32"), Scalar("n", "u32")],
        sources={"python": noop},
    )
    args.update(kw)
    return Kernel(**args)


def test_params_split_in_declared_order() -> None:
    k = make()
    assert [p.name for p in k.buffer_params] == ["x", "y"]
    assert [p.name for p in k.scalar_params] == ["a", "n"]
    assert k.scalar_dtypes == (np.dtype(np.float32), np.dtype(np.uint32))
    assert k.cube_dim == (1, 1, 1)
    assert make(cube_dim=64).cube_dim == (64, 1, 1)
    assert make(cube_dim=(8, 8)).cube_dim == (8, 8, 1)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(name="not an identifier"), "identifier"),
        (dict(params=[Buffer("x", "f32"), Scalar("x", "u32")]), "unique"),
        (dict(sources={}), "no sources"),
        (dict(cube_dim=(0, 1, 1)), "cube_dim"),
        (dict(cube_dim=2.5), "cube_dim"),
        (dict(cube_dim=None), "cube_dim"),
        (dict(cube_dim="256"), "cube_dim"),
        (dict(cube_dim=(8, 8.0)), "cube_dim"),
        (dict(cube_dim=(1, 1, 1, 1)), "cube_dim"),
        (dict(cube_dim=()), "cube_dim"),
        (dict(cube_dim=True), "cube_dim"),
        (dict(params=["x"]), "Buffer or Scalar"),
        (dict(dtypes=("f17",)), r"dtypes: unknown dtype 'f17'; use one of f16, f32, .*bool"),
        (dict(dtypes="f16"), r"dtypes must be an iterable of dtype names .*got 'f16'"),
        (dict(dtypes=3), "dtypes must be an iterable"),
    ],
)
def test_bad_kernels_are_rejected(kw, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match=match):
        make(**kw)


def test_buffer_validation() -> None:
    with pytest.raises(ValidationError, match="unknown dtype"):
        Buffer("x", "f128")
    with pytest.raises(ValidationError, match="access"):
        Buffer("x", "f32", "readwrite")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="vector"):
        Buffer("x", "f32", vector=3)
    with pytest.raises(ValidationError, match="atomic"):
        Buffer("x", "f32", atomic=True)
    assert Buffer("x", np.float64).dtype == "f64"
    assert Buffer("v", "f32", vector=4).itemsize == 16


def test_dtype_names_cover_the_contract() -> None:
    assert set(DTYPES) == {"f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool"}
    for name, dt in DTYPES.items():
        assert dtype_of(dt) == name


@pytest.mark.parametrize(
    "dtype, value, expected",
    [
        ("u32", 7, 7),
        ("i8", -128, -128),
        ("f16", 1.5, 1.5),
        ("f64", 1e300, 1e300),
        ("bool", True, True),
        ("i64", 2**62, 2**62),
        ("u8", 3.0, 3),
    ],
)
def test_scalars_convert(dtype, value, expected) -> None:  # type: ignore[no-untyped-def]
    out = to_scalar(Scalar("s", dtype), value)
    assert out.dtype == DTYPES[dtype]
    assert out == expected


@pytest.mark.parametrize(
    "dtype, value, match",
    [
        ("u32", -1, "does not fit"),
        ("u8", 256, "does not fit"),
        ("i32", 2**31, "does not fit"),
        ("i32", 1.5, "not an integer"),
        ("f16", 1e6, "overflows"),
        ("f32", "x", "not a number"),
        ("bool", 2, "not a bool"),
        ("u64", None, "not a number"),
    ],
)
def test_scalars_that_do_not_fit_are_rejected(dtype, value, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match=match):
        to_scalar(Scalar("s", dtype), value)


def test_pack_scalars_counts() -> None:
    k = make()
    assert [type(v) for v in k.pack_scalars([2.0, 3])] == [np.float32, np.uint32]
    with pytest.raises(ValidationError, match="takes 2 scalars"):
        k.pack_scalars([1.0])


def test_kernel_id_tracks_what_changes_the_binary() -> None:
    a, b = make(), make()
    assert a.kernel_id(ExecutionMode.CHECKED, "python") == b.kernel_id(ExecutionMode.CHECKED, "python")
    assert a.kernel_id(ExecutionMode.CHECKED, "python") != a.kernel_id(ExecutionMode.UNCHECKED, "python")
    assert make(defines={"U": 2}).kernel_id(ExecutionMode.CHECKED, "python") != a.kernel_id(
        ExecutionMode.CHECKED, "python"
    )
    assert make(cube_dim=32).digest != a.digest
    assert make(sources={"python": noop, "c": "x"}).digest != a.digest


def test_dtypes_the_source_uses_join_the_params_dtypes() -> None:
    k = make(dtypes=["f16", np.float64, "f16"])
    assert k.dtypes == ("f16", "f64")  # names, sorted, once each
    assert k.uses_dtypes == {"f16", "f64", "f32", "u32"}
    assert make().dtypes == () and make().uses_dtypes == {"f32", "u32"}


def test_core_dtypes_in_the_source_need_nothing_and_are_left_out() -> None:
    # A bool local in WGSL is no reason to refuse a kernel on WebGPU, whose buffers cannot be bool.
    k = make(dtypes=("bool", "i32", "f16"))
    assert k.dtypes == ("f16",)
    assert k.lacking({"f32", "u32", "f16"}) is None


def test_the_source_dtypes_are_part_of_the_compile_key() -> None:
    a, half = make(), make(dtypes=("f16",))
    key = ExecutionMode.CHECKED, "c"
    assert half.digest != a.digest and half.kernel_id(*key) != a.kernel_id(*key)
    assert make(dtypes=("f16",)).kernel_id(*key) == half.kernel_id(*key)
    # A dtype the params already use changes nothing the backends generate: the same compile.
    assert make(dtypes=("f32",)).kernel_id(*key) == a.kernel_id(*key)


def test_lacking_names_the_first_use_a_device_lacks() -> None:
    k = make(params=[Buffer("x", "f32"), Scalar("h", "f16")], dtypes=("f64", "i64"))
    assert k.lacking({"f32", "f16", "f64", "i64"}) is None
    assert k.lacking({"f32", "f64", "i64"}) == ("f16", "param 'h' uses f16")
    assert k.lacking({"f32", "f16", "f64"}) == ("i64", "its source uses i64 (Kernel dtypes=('f64', 'i64'))")


def test_pick_dialect() -> None:
    k = make(sources={"wgsl": "...", "c": "..."})
    assert k.pick_dialect(("cuda", "c"), "cuda") == "c"
    with pytest.raises(ValidationError, match="no source for backend 'cpu'"):
        k.pick_dialect(("python",), "cpu")


def test_cube_count(cpu_client: Any) -> None:
    assert CubeCount(3).as_tuple() == (3, 1, 1)
    assert CubeCount(0).is_empty and CubeCount(2, 0).is_empty and not CubeCount(1).is_empty
    for bad in (-1, 1.5, True, 2**32):
        with pytest.raises(ValidationError):
            CubeCount(bad)  # type: ignore[arg-type]
    dyn = CubeCount.dynamic(cpu_client.create(np.ones(3, np.uint32)))
    assert dyn.is_dynamic and not dyn.is_empty
    with pytest.raises(ValidationError, match="Handle"):
        CubeCount.dynamic(object())  # type: ignore[arg-type]


def test_compile_cache_compiles_each_key_once_under_contention() -> None:
    cache = CompileCache()
    key = make().kernel_id(ExecutionMode.CHECKED, "python")
    calls: list[int] = []
    barrier = threading.Barrier(8)

    def compile_() -> str:
        calls.append(1)
        return "binary"

    def worker() -> None:
        barrier.wait()
        assert cache.get(key, compile_) == "binary"

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert cache.misses == 1 and cache.hits == 7
