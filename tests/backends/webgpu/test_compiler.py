"""The ``wgsl`` dialect: generated declarations, the scalar struct layout and compile-error mapping."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from cubeplug import Buffer, CompileError, CubeCount, Kernel, Scalar
from cubeplug.backends.webgpu.compiler import (
    DTYPE_FEATURES,
    check_params,
    compile_error,
    generate_header,
    scalar_layout,
)
from cubeplug.core import wgsl

SRC = "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z) fn k() {}\n"


def _kernel(*params, defines=None, cube_dim=(8, 2, 1)):  # type: ignore[no-untyped-def]
    return Kernel("k", params, {"wgsl": SRC}, cube_dim=cube_dim, defines=defines or {})


def test_header_declares_buffers_scalars_and_consts() -> None:
    k = _kernel(
        Buffer("x", "f32", "read"),
        Buffer("v", "u32", "read_write", vector=4),
        Buffer("hits", "u32", "read", atomic=True),
        Scalar("a", "f32"),
        Scalar("n", "u32"),
        defines={"UNROLL": 4, "SCALE": 0.5, "FLAG": False, "T": "f32", "EXPR": "UNROLL * 2"},
    )
    checked = generate_header(k, enforce_access=True)
    lines = checked.splitlines()
    assert "const CUBE_DIM_X: u32 = 8u;" in lines and "const CUBE_DIM_Y: u32 = 2u;" in lines
    assert "const UNROLL = 4;" in lines and "const SCALE = 0.5;" in lines
    assert "const FLAG: bool = false;" in lines and "alias T = f32;" in lines
    assert "const EXPR = UNROLL * 2;" in lines
    assert "@group(0) @binding(0) var<storage, read> x: array<f32>;" in lines
    assert "@group(0) @binding(1) var<storage, read_write> v: array<vec4<u32>>;" in lines
    # Atomics need read_write whatever the declared access.
    assert "@group(0) @binding(2) var<storage, read_write> hits: array<atomic<u32>>;" in lines
    assert "struct CubeplugScalars { a: f32, n: u32 }" in lines
    assert "@group(0) @binding(3) var<storage, read> scalars: CubeplugScalars;" in lines
    assert "enable f16;" not in lines
    # The pipeline's declarations are all read_write (one page may hold a read and a written slice).
    run = generate_header(k, enforce_access=False)
    assert "@group(0) @binding(0) var<storage, read_write> x: array<f32>;" in run.splitlines()
    assert run.count("\n") == checked.count("\n")


@pytest.mark.parametrize("enforce_access", [True, False])
@pytest.mark.parametrize(
    "kernel",
    [
        _kernel(Buffer("x", "f16"), Scalar("h", "f16")),
        # f32 params, f16 locals: the kernel says so with dtypes=.
        Kernel("k", [Buffer("x", "f32")], {"wgsl": SRC}, dtypes=("f16",)),
    ],
    ids=["params", "source"],
)
def test_f16_enables_the_extension(kernel: Kernel, enforce_access: bool) -> None:
    assert generate_header(kernel, enforce_access=enforce_access).splitlines()[0] == "enable f16;"


def test_a_feature_the_source_needs_is_a_compile_error_as_a_params_is() -> None:
    half = Kernel("k", [Buffer("x", "f32")], {"wgsl": SRC}, dtypes=("f16",))
    lacks = r"its source uses f16 \(Kernel dtypes=\('f16',\)\), which needs the 'shader-f16' feature"
    with pytest.raises(CompileError, match=lacks):
        check_params(half, frozenset(), 8)
    check_params(half, frozenset({"shader-f16"}), 8)
    with pytest.raises(CompileError, match="param 'h' uses f16, which needs the 'shader-f16' feature"):
        check_params(_kernel(Buffer("h", "f16")), frozenset(), 8)
    # A type WGSL has no spelling for at all, used only by the source.
    with pytest.raises(CompileError, match=r"its source uses i8 .*which needs a type WGSL does not have"):
        check_params(Kernel("k", [Buffer("x", "f32")], {"wgsl": SRC}, dtypes=("i8",)),
                     frozenset(DTYPE_FEATURES.values()), 8)


def test_scalar_layout_follows_wgsl_alignment() -> None:
    k = _kernel(
        Scalar("h", "f16"), Scalar("u", "u32"), Scalar("d", "f64"), Scalar("q", "i64"), Scalar("f", "f32")
    )
    layout = scalar_layout(k)
    assert layout is not None
    # h@0 (2 B), u@4, d@8, q@16, f@24, struct size rounded to its 8 B alignment: 32.
    assert layout.binding_size == 32 == layout.packer.size
    packed = layout.packer.pack(
        np.float16(1.5), np.uint32(7), np.float64(2.25), np.int64(-3), np.float32(0.5)
    )
    assert struct.unpack_from("<e", packed, 0)[0] == 1.5
    assert struct.unpack_from("<I", packed, 4)[0] == 7
    assert struct.unpack_from("<d", packed, 8)[0] == 2.25
    assert struct.unpack_from("<q", packed, 16)[0] == -3
    assert struct.unpack_from("<f", packed, 24)[0] == 0.5
    # A lone f16 struct is 2 B in WGSL; its binding is rounded up to 4 B.
    single = scalar_layout(_kernel(Scalar("h", "f16")))
    assert single is not None and single.binding_size == 4
    assert scalar_layout(_kernel(Buffer("x", "f32"))) is None


def test_params_wgsl_cannot_bind_are_compile_errors() -> None:
    features = frozenset({"shader-f16"})
    with pytest.raises(CompileError, match="bool"):
        check_params(_kernel(Buffer("b", "bool")), features, 8)
    with pytest.raises(CompileError, match="shader-f64"):
        check_params(_kernel(Buffer("d", "f64")), features, 8)
    with pytest.raises(CompileError, match="atomic vectors"):
        check_params(_kernel(Buffer("a", "u32", atomic=True, vector=4)), features, 8)
    with pytest.raises(CompileError, match="storage bindings"):
        check_params(_kernel(*[Buffer(f"b{i}", "f32") for i in range(8)], Scalar("n", "u32")), features, 8)
    check_params(_kernel(Buffer("h", "f16"), Scalar("n", "u32")), features, 8)


def test_compile_error_maps_lines_to_the_user_source() -> None:
    k = _kernel(Buffer("x", "f32"))
    header = generate_header(k, enforce_access=True)
    offset = header.count("\n")
    log = (
        "Validation Error\n\nCaused by:\n  In wgpuDeviceCreateShaderModule\n\n"
        "Shader '' parsing error: no definition in scope for identifier: `foo`\n"
        f"  ┌─ wgsl:{offset + 2}:9\n  │\n{offset + 2} │   y = foo;\n  │       ^^^ unknown identifier\n"
    )
    err = compile_error(k, header, "fn k() {\n  y = foo;\n}\n", RuntimeError(log))
    assert (err.line, err.col) == (2, 9)
    assert "no definition in scope for identifier: `foo`" in str(err) and "unknown identifier" in str(err)
    assert "--- generated declarations ---" in err.log
    # An error inside the generated declarations says so instead of pointing into the user's source.
    in_header = compile_error(k, header, "", RuntimeError("bad\n  ┌─ wgsl:1:1\n"))
    assert in_header.line is None and "generated declarations" in str(in_header)


def test_struct_buffers_are_declared_as_structs_holding_the_array() -> None:
    k = _kernel(Buffer("x", "f32", "read"), Buffer("v", "u32", vector=4), Scalar("n", "u32"))
    for enforce, access in ((True, "read"), (False, "read_write")):
        lines = generate_header(k, enforce_access=enforce, structs=True).splitlines()
        assert f"struct CubeplugBuffer_x {{ {wgsl.BUFFER_MEMBER}: array<f32> }}" in lines
        assert f"@group(0) @binding(0) var<storage, {access}> x: CubeplugBuffer_x;" in lines
        assert "@group(0) @binding(1) var<storage, read_write> v: CubeplugBuffer_v;" in lines
        assert "@group(0) @binding(2) var<storage, read> scalars: CubeplugScalars;" in lines


_SCALE = """@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < scalars.n) { y.data[gid.x] = 2.0 * x.data[gid.x]; }
}
"""


_SCALE_PARAMS = (Buffer("x", "f32", "read"), Buffer("y", "f32"), Scalar("n", "u32"))


def _scale(client, source: str, x: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Launch the kernel of ``source`` on ``x`` (its _SCALE_PARAMS); what it wrote."""
    kernel = Kernel("scale", _SCALE_PARAMS, {"wgsl": source}, cube_dim=64)
    out = client.empty(x.nbytes)
    client.launch(kernel, CubeCount(-(-len(x) // 64)), [client.create(x), out], [len(x)])
    return client.to_numpy(out, "f32")  # type: ignore[no-any-return]


def test_a_source_that_says_struct_buffers_reaches_them_as_members(client) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(_scale(client, wgsl.STRUCT_BUFFERS + "\n" + _SCALE, x), 2 * x)
    # Without that first line (or with another one) the buffers are arrays, which have no members.
    for source in (_SCALE, wgsl.STRUCT_BUFFERS + " v2\n" + _SCALE):
        with pytest.raises(CompileError, match="data"):
            _scale(client, source, x)


def test_a_struct_buffers_source_that_writes_a_read_buffer_is_a_compile_error(client) -> None:  # type: ignore[no-untyped-def]
    writes_x = _SCALE.replace("y.data[gid.x] = 2.0 * x.data[gid.x];", "x.data[gid.x] = 2.0;")
    with pytest.raises(CompileError, match="not permitted"):
        _scale(client, wgsl.STRUCT_BUFFERS + "\n" + writes_x, np.zeros(4, np.float32))
