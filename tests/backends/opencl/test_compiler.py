"""OpenCL compilation: both dialects, the program caches, CompileError details, signature checks."""

from __future__ import annotations

import time

import numpy as np
import pytest

from cubeplug import Buffer, CompileError, Kernel, Scalar, ValidationError
from cubeplug.backends.opencl import compiler
from cubeplug.core.cdialect import opencl_spellings
from tests.backends.opencl.conftest import make_client, requires_opencl
from tests.backends.opencl.kernels import ADD_ONE

pytestmark = requires_opencl

BROKEN = Kernel(
    "broken",
    [Buffer("x", "f32")],
    {"c": "KERNEL broken(GLOBAL float* x) {\n    x[0] = 1.0f;\n    x[1] = undefined_name;\n}\n"},
)


def test_compile_error_has_log_options_line_and_numbered_source(client) -> None:  # type: ignore[no-untyped-def]
    keep = client.create(np.arange(4, dtype=np.float32))
    with pytest.raises(CompileError) as info:
        client.launch(BROKEN, 1, [keep], [])
    err = info.value
    assert err.backend == "opencl" and err.kernel == "broken"
    assert "undefined_name" in err.log
    assert err.line == 3  # the line in the kernel's own source, after the prelude
    assert err.col is not None
    assert "-cl-kernel-arg-info" in err.options
    dump = err.dump()
    assert "undefined_name" in dump and "KERNEL broken" in dump and "#define KERNEL" in dump
    assert " | " in err.numbered_source()
    # The client keeps working and the handle is intact.
    np.testing.assert_array_equal(client.to_numpy(keep, "f32"), np.arange(4, dtype=np.float32))
    with pytest.raises(CompileError):  # failures are not cached as successes
        client.launch(BROKEN, 1, [keep], [])


@pytest.mark.parametrize(
    ("params", "source", "match"),
    [
        ([Buffer("x", "f32")], "KERNEL k(GLOBAL float* x, int extra) {}", "2 arguments but 1 params"),
        ([Scalar("x", "f32")], "KERNEL k(GLOBAL float* x) {}", "is a Scalar"),
        ([Buffer("x", "f32")], "KERNEL k(float x) {}", "not a GLOBAL pointer"),
        ([Buffer("x", "f32")], "KERNEL k(GLOBAL int* x) {}", "declared f32"),
        ([Buffer("x", "f32", vector=4)], "KERNEL k(GLOBAL float* x) {}", "float4"),
        ([Scalar("n", "u64")], "KERNEL k(unsigned int n) {}", "declared u64"),
    ],
)
def test_signature_mismatch(client, params, source, match) -> None:  # type: ignore[no-untyped-def]
    kernel = Kernel("k", params, {"c": source})
    with pytest.raises(CompileError, match=match):
        client.launch_unchecked(
            kernel,
            1,
            [client.empty(16) for p in params if isinstance(p, Buffer)],
            [1 for p in params if isinstance(p, Scalar)],
        )


def test_missing_entry_point(client) -> None:  # type: ignore[no-untyped-def]
    kernel = Kernel("absent", [], {"opencl": "__kernel void present() {}"})
    with pytest.raises(CompileError, match=r"no kernel named 'absent'.*present"):
        client.launch(kernel, 1)


def test_non_text_source_and_missing_dialect(client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CompileError, match="source text"):
        client.launch(Kernel("k", [], {"c": lambda: None}), 1)
    with pytest.raises(ValidationError, match="no source for backend 'opencl'"):
        client.launch(Kernel("k", [], {"wgsl": "fn main() {}"}), 1)


def test_unsupported_dtype_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    missing = {"f16", "f64"} - set(client.capabilities.dtypes)
    if not missing:
        pytest.skip("this device supports every dtype")
    dt = sorted(missing)[0]
    with pytest.raises(ValidationError, match=f"param 'x' uses {dt}"):
        client.launch(
            Kernel("k", [Buffer("x", dt)], {"c": "KERNEL k(GLOBAL half* x) {}"}), 1, [client.empty(8)]
        )


def test_too_large_cube_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    limit = client.capabilities.max_cube_threads
    kernel = Kernel("big", [], {"c": "KERNEL big() {}"}, cube_dim=(limit * 2, 1, 1))
    with pytest.raises(ValidationError, match=f"at most {limit}"):
        client.launch(kernel, 1)


def test_long_long_means_64_bits() -> None:
    assert (
        opencl_spellings("unsigned long long a; long long b; long  long\tc;") == "ulong a; long b; long\tc;"
    )
    c = make_client()
    try:
        kernel = Kernel(
            "sizes",
            [Buffer("out", "i32", "write")],
            {
                "c": "KERNEL sizes(GLOBAL int* out) { out[0] = sizeof(long long); "
                "out[1] = sizeof(unsigned long long); out[2] = sizeof(i64); out[3] = sizeof(u64); }"
            },
        )
        out = c.empty(16)
        c.launch(kernel, 1, [out], [])
        assert list(c.to_numpy(out, "i32")) == [8, 8, 8, 8]
    finally:
        c.close()


def test_programs_are_cached_per_device_across_clients() -> None:
    unique = Kernel(
        "cached_probe",
        [Buffer("x", "i32")],
        {"c": f"KERNEL cached_probe(GLOBAL int* x) {{ x[0] = {time.time_ns() % 1000003}; }}"},
    )
    a, b = make_client(), make_client()
    try:
        t0 = time.perf_counter()
        a.launch(unique, 1, [a.empty(4)], [])
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        b.launch(unique, 1, [b.empty(4)], [])
        second = time.perf_counter() - t0
        assert second < first
        assert a.server.compile_cache.misses == 1 and b.server.compile_cache.misses == 1
        pa = a.launcher.compiled_for(unique).program
        pb = b.launcher.compiled_for(unique).program
        assert pa.kernel is not pb.kernel  # each client binds its own cl.Kernel
        assert pa.kernel.program.int_ptr == pb.kernel.program.int_ptr
    finally:
        a.close()
        b.close()


def test_compilation_cache_can_be_disabled() -> None:
    c = make_client(compilation={"cache": False})
    try:
        x = c.create(np.zeros(64, np.int32))
        c.launch(ADD_ONE, 1, [x], [64])
        assert c.to_numpy(x, "i32").sum() == 64
    finally:
        c.close()


def test_source_and_header_lines() -> None:
    from cubeplug.backends.opencl.devices import device_context
    from cubeplug.core.config import Config

    ctx = device_context(0, Config())
    src = compiler.source_for(ctx, ADD_ONE, "c")
    skip = compiler.header_lines(ctx, ADD_ONE, "c")
    assert src.splitlines()[skip].startswith("KERNEL add_one")
    assert "#define CUBE_DIM_STATIC_X 64" in src


def test_reported_type_names_are_normalised() -> None:
    assert compiler.base_type("const unsigned int*") == "uint"
    assert compiler.base_type("float4*") == "float4"
    assert compiler.base_type("u32*") == "u32"
    assert compiler.base_type("signed char") == "char"
    assert compiler.base_type("volatile __global int *") == "int"


def test_pairwise_setter_fallback() -> None:
    calls: list[tuple[int, object]] = []
    setter = compiler._pairwise(lambda i, v: calls.append((i, v)))
    setter((0, "a", 2, "b"))
    assert calls == [(0, "a"), (2, "b")]
