"""Every error kind names the user's file:line:col and the construct; no internal AttributeError."""

from __future__ import annotations

import linecache
import re
from typing import Any

import numpy as np
import pytest

from cubeplug import lang as cl
from cubeplug.core.errors import CompileError
from cubeplug.lang import Array, Comptime, KernelSyntaxError, KernelTypeError, f32, f64, i32, u32

CORE = frozenset({"f32", "i32", "u32", "bool"})


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (in a comment)."""
    for n, text in enumerate(linecache.getlines(__file__), 1):
        if re.search(rf"# {re.escape(marker)}(\s|$)", text):
            return n
    raise AssertionError(marker)


@cl.kernel
def bad_with(y: Array[f32]):
    with open("x"):  # E-with
        y[0] = 1.0


@cl.kernel
def bad_name(y: Array[f32]):
    y[0] = undefined_thing  # E-name  # noqa: F821


@cl.kernel
def bad_mix(y: Array[f32], n: u32):
    i = i32(1)
    if i < n:  # E-mix
        y[0] = 1.0


@cl.kernel
def bad_store(y: Array[u32]):
    y[0] = 1.5  # E-store


@cl.kernel
def bad_div(y: Array[i32], a: i32):
    y[0] = a / 2  # E-div


@cl.kernel
def bad_assign(y: Array[f32]):
    v = f32(1)
    v = u32(2)  # E-assign
    y[0] = v


@cl.kernel
def uses_f64(y: Array[f32]):
    v = f64(y[0])  # E-f64
    y[0] = f32(v)


@cl.kernel
def barrier_in_branch(y: Array[f32]):
    if cl.UNIT_POS < 4:
        cl.sync_cube()  # E-branch
    y[0] = 1.0


@cl.kernel
def barrier_after_return(y: Array[f32]):
    if y[cl.UNIT_POS] > 0.0:
        return
    cl.sync_cube()  # E-return


@cl.kernel
def barrier_in_divergent_loop(y: Array[f32], n: u32):
    j = u32(0)
    while j < n:
        if y[j] > 0.0:
            break
        cl.sync_cube()  # E-loop
        j += 1


@cl.kernel
def barrier_ok(y: Array[f32], n: u32):
    s = n
    while s > 0:
        if s > cl.UNIT_POS:
            y[cl.UNIT_POS] += 1.0
        cl.sync_cube()
        s = s >> 1


@cl.kernel
def unroll_runtime(y: Array[f32], n: u32):
    for i in cl.unroll(range(n)):  # E-unroll
        y[i] = 0.0


@cl.kernel
def break_in_unroll(y: Array[f32]):
    for i in cl.unroll(range(4)):
        if y[i] > 0.0:
            break  # E-unroll-break


@cl.kernel
def needs_comptime(y: Array[f32], N: Comptime[int]):
    y[0] = f32(N)


@cl.func
def recurse(v: f32) -> f32:
    return recurse(v)  # E-recurse


@cl.kernel
def calls_recursive(y: Array[f32]):
    y[0] = recurse(y[0])


def plain_helper(v: float) -> float:
    return v


@cl.kernel
def calls_plain(y: Array[f32]):
    y[0] = plain_helper(y[0])  # E-plain


UNSUPPORTED = [
    ("lambda", "f = lambda: 0"),
    ("list", "v = [1, 2]"),
    ("comprehension", "v = [i for i in range(3)]"),
    ("try", "try:\n        pass\n    except Exception:\n        pass"),
    ("string", "v = 'text'"),
    ("tuple-assign", "a, b = 1, 2"),
    ("for-else", "for i in range(3):\n        pass\n    else:\n        pass"),
    ("walrus", "if (v := 3) > 2:\n        pass"),
    ("global", "global zzz"),
    ("del", "del y"),
    ("assert", "assert True"),
    ("raise", "raise ValueError()"),
    ("nested-def", "def inner():\n        pass"),
    ("attribute", "v = y.shape"),
    ("dict", "v = {1: 2}"),
    ("slice", "v = y[1:2]"),
    ("starred-call", "v = max(*y)"),
    ("is", "v = y is y"),
    ("in", "v = 1 in (1, 2)"),
    ("matmul-op", "v = 1 @ 2"),
]


def _kernel_from_text(name: str, body: str, tmp_path: Any) -> Any:
    """A kernel defined in a real file (so its source can be captured)."""
    path = tmp_path / f"k_{name.replace('-', '_')}.py"
    path.write_text(
        "from cubeplug import lang as cl\nfrom cubeplug.lang import Array, f32\n\n"
        f"@cl.kernel\ndef k(y: Array[f32]):\n    {body}\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace["k"]


@pytest.mark.parametrize(("name", "body"), UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_unsupported_syntax_is_a_located_syntax_error(name: str, body: str, tmp_path: Any) -> None:
    kern = _kernel_from_text(name, body, tmp_path)
    with pytest.raises((KernelSyntaxError, KernelTypeError)) as info:
        kern.ir()
    err = info.value
    assert isinstance(err, CompileError)
    assert err.loc.file.endswith(f"k_{name.replace('-', '_')}.py")
    assert err.loc.line >= 6, str(err)
    assert f":{err.loc.line}:" in str(err)


@pytest.mark.parametrize(
    ("kern", "error", "marker", "words"),
    [
        (bad_with, KernelSyntaxError, "E-with", "not supported"),
        (bad_name, KernelSyntaxError, "E-name", "unknown name 'undefined_thing'"),
        (bad_mix, KernelTypeError, "E-mix", "mismatched types i32 and u32"),
        (bad_store, KernelTypeError, "E-store", "1.5"),
        (bad_div, KernelTypeError, "E-div", "use `//`"),
        (bad_assign, KernelTypeError, "E-assign", "'v' is f32"),
        (unroll_runtime, KernelSyntaxError, "E-unroll", "comptime int bounds"),
        (break_in_unroll, KernelSyntaxError, "E-unroll-break", "unrolled loop"),
        (calls_recursive, KernelSyntaxError, "E-recurse", "recursion"),
        (calls_plain, KernelSyntaxError, "E-plain", "@cl.func"),
    ],
)
def test_error_names_file_line_col(kern: Any, error: type, marker: str, words: str) -> None:
    with pytest.raises(error) as info:
        kern.ir()
    err = info.value
    line = line_of(marker)
    assert err.loc.file == __file__ and err.loc.line == line, str(err)
    assert f"{__file__}:{line}:{err.loc.col}" in str(err)
    assert words in str(err)
    assert "^" in str(err)  # the excerpt with a caret


def test_missing_capability_is_a_type_error() -> None:
    uses_f64.ir(dtypes=CORE | {"f64"})  # fine where the device has f64
    with pytest.raises(KernelTypeError, match="f64 is not supported by this device") as info:
        uses_f64.ir(dtypes=CORE)
    assert info.value.loc.line == line_of("E-f64")


@pytest.mark.parametrize(
    ("kern", "marker", "why"),
    [
        (barrier_in_branch, "E-branch", "depends on a per-unit value"),
        (barrier_after_return, "E-return", "some units returned"),
        (barrier_in_divergent_loop, "E-loop", "the loop at"),
    ],
)
def test_barrier_in_non_uniform_control_flow(kern: Any, marker: str, why: str) -> None:
    with pytest.raises(KernelSyntaxError, match="sync_cube\\(\\) must be reached by every unit") as info:
        kern.ir()
    assert info.value.loc.line == line_of(marker)
    assert why in str(info.value)


def test_barrier_in_uniform_loop_is_accepted() -> None:
    assert "sync_cube()" in barrier_ok.ir()


def test_comptime_arguments_are_checked() -> None:
    with pytest.raises(KernelTypeError, match="pass N=... at launch"):
        needs_comptime.ir()
    with pytest.raises(KernelTypeError, match="unknown comptime"):
        needs_comptime.ir(N=1, M=2)
    assert "3.0:f32" in needs_comptime.ir(N=3)


@cl.kernel
def comptime_local(y: Array[f32], N: Comptime[float], FLAG: Comptime[bool]):
    v = N
    if FLAG:
        v = v * 2.0
    y[0] = v


def test_comptime_values_are_checked_against_their_annotation() -> None:
    for bad, words in ((1.5, r"Comptime\[int\], got 1.5 \(float\)"), (True, r"got True \(bool\)"),
                       ("3", r"got '3' \(str\)")):
        with pytest.raises(KernelTypeError, match=words):
            needs_comptime.ir(N=bad)
    with pytest.raises(KernelTypeError, match=r"Comptime\[bool\], got 1 \(int\)"):
        comptime_local.ir(N=1.0, FLAG=1)
    # an int for a float parameter is the float: the same typed kernel as 2.0
    assert comptime_local.ir(N=2, FLAG=True) == comptime_local.ir(N=2.0, FLAG=True)


def test_errors_name_their_kernel() -> None:
    for kern in (needs_comptime, bad_mix, bad_div, bad_store):  # raised by the parameters, typing, stores
        with pytest.raises(KernelTypeError) as info:
            kern.ir(N=1.5) if kern is needs_comptime else kern.ir()
        assert info.value.kernel == kern.__name__
        assert str(info.value).startswith(f"kernel {kern.__name__!r} failed to compile")


def test_equal_comptime_values_of_other_types_are_other_launches(client: Any) -> None:
    """1 and 1.0 are equal in Python: a launch with the wrong one must not find the right one's
    specialization or launcher in a cache."""
    y = client.create(np.zeros(1, np.float32))
    needs_comptime.launch(client, 1, 1, y, N=3)
    needs_comptime.launch(client, 1, 2, y, N=3)  # the fast path now remembers cube dim 2
    with pytest.raises(KernelTypeError, match=r"got 3.0 \(float\)"):
        needs_comptime.launch(client, 1, 1, y, N=3.0)  # the launcher dict holds (1, N=3)
    assert client.to_numpy(y, "f32")[0] == 3.0
    needs_comptime.launch(client, 1, 1, y, N=1)  # the fast path remembers (1, N=1) now
    for other in (1.0, True):  # equal to 1 in Python: not the same value to the kernel
        with pytest.raises(KernelTypeError, match=r"Comptime\[int\], got"):
            needs_comptime.launch(client, 1, 1, y, N=other)
    assert client.to_numpy(y, "f32")[0] == 1.0


def test_source_not_available() -> None:
    namespace: dict[str, Any] = {"cl": cl, "Array": Array, "f32": f32}
    exec("@cl.kernel\ndef k(y: Array[f32]):\n    y[0] = 1.0\n", namespace)
    with pytest.raises(KernelSyntaxError, match="source of 'k' is not available"):
        namespace["k"].ir()


def test_backend_compile_error_points_at_the_python_line(cpu: Any) -> None:
    spec = bad_mix_fixed.specialize_for("c", None, 64, True, {})
    line = next(i for i, loc in enumerate(spec.line_map, 1) if loc is not None and loc.line == line_of("E-c"))
    backend_error = CompileError("boom", backend="opencl", kernel="k", line=line, col=3)
    mapped = bad_mix_fixed._map_error(spec, backend_error)
    assert mapped.loc.line == line_of("E-c") and "boom" in str(mapped)


@cl.kernel
def bad_mix_fixed(y: Array[f32], n: u32):
    i = u32(1)
    if i < n:
        y[0] = 1.0  # E-c


def test_errors_on_every_dtype_cast_are_clean() -> None:
    np.testing.assert_equal(cl.u32(3), np.uint32(3))


def _sync_then_store(y: Array[f32]):
    i = cl.ABSOLUTE_POS
    cl.sync_cube()  # E-sync
    if i < len(y):
        y[i] = 1.0


def test_c_source_carries_line_directives_to_the_users_lines() -> None:
    spec = cl.kernel(_sync_then_store).specialize_for("c", None, 64, True, {})
    lines = spec.source.splitlines()
    barrier = next(n for n, text in enumerate(lines) if "SYNC_CUBE();" in text)
    directive = max(n for n in range(barrier) if lines[n].startswith("#line "))
    number, name = lines[directive].split(" ", 2)[1:]
    assert name == f'"{__file__}"'
    assert int(number) + (barrier - directive - 1) == line_of("E-sync")  # as the compiler counts
    again = cl.kernel(_sync_then_store).specialize_for("c", None, 64, True, {})
    assert again.source == spec.source  # deterministic: compile caches still hit


def test_a_backend_compile_error_of_generated_c_reports_the_users_line(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generated C is broken on purpose at the barrier (an undeclared function): the compiler
    (PoCL here, NVRTC on the GPU machine) reports it through the #line directives at the Python line."""
    from cubeplug.lang import codegen_c, ir

    if "c" not in client.server.dialects:
        pytest.skip(f"{client.backend} does not compile the c dialect")
    real = codegen_c.CGen.stmt_memory

    def broken(self: Any, s: Any) -> None:
        if isinstance(s, ir.Barrier):
            self.line("cl_no_such_function_16();", s.loc)
        else:
            real(self, s)

    monkeypatch.setattr(codegen_c.CGen, "stmt_memory", broken)
    kern = cl.kernel(_sync_then_store)
    y = client.create(np.zeros(64, np.float32))
    with pytest.raises((cl.KernelError, CompileError)) as info:
        kern.launch(client, 1, 64, y)
    if not isinstance(info.value, cl.KernelError):  # the compiler's log names no line of the user's
        assert __file__ not in info.value.log, "the log names the user's file: it should have mapped"
        pytest.skip(f"{client.device.name}'s compiler log names no source line: {info.value.log[:200]!r}")
    assert info.value.loc.line == line_of("E-sync")
    assert f"at {__file__}:{line_of('E-sync')}: " in str(info.value)  # found in the compiler's log
    assert __file__ in info.value.__cause__.log  # which names the user's file: the #line directives
    assert "cl_no_such_function_16" in str(info.value)


@cl.kernel
def _big_shared(x: Array[f32], N: Comptime[int]):
    small = cl.shared(u32, 16)
    tile = cl.shared(f32, N)  # E-shared
    tile[cl.UNIT_POS] = x[cl.UNIT_POS]
    small[0] = u32(1)
    cl.sync_cube()
    x[cl.UNIT_POS] = tile[0]


def test_oversized_shared_memory_is_a_type_error_at_its_line(client: Any) -> None:
    """Every backend says how much shared memory a cube may use; a kernel needing more is rejected
    when specialized (PoCL would abort the process when building it)."""
    limit = client.capabilities.max_shared_bytes
    assert limit >= 16384
    fits = limit // 4 - 16  # with the 64 bytes of `small`: exactly the limit
    assert "tile" in _big_shared.source(client, 64, N=fits) or client.backend == "cpu"
    x = client.create(np.ones(64, np.float32))
    with pytest.raises(KernelTypeError) as info:
        _big_shared.launch(client, 1, 64, x, N=fits + 1)
    e = info.value
    assert e.loc.line == line_of("E-shared") and e.construct == "shared"
    assert f"{limit + 4} bytes" in str(e) and f"the {limit} bytes" in str(e)
