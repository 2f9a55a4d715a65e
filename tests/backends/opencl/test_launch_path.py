"""The compiled launcher (launch_path.py, _fastlaunch.c) against the Python launch it stands in for.

Every launch is run twice, on a client with the launcher and on one without (``native_launch =
false``): results, errors and messages must be the same. ``CUBEPLUG_REQUIRE_NATIVE_LAUNCH=1`` (set
by scripts/test.sh) makes a missing build a failure instead of a skip.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cubeplug import Buffer, CubeCount, Kernel, LaunchError, Scalar, ValidationError
from cubeplug.backends.opencl import launch_path
from cubeplug.core.errors import ConfigError
from cubeplug.core.kernel import DTYPES
from cubeplug.core.launcher import Launcher
from tests.backends.opencl.conftest import SKIP_REASON, make_client, requires_opencl

pytestmark = requires_opencl

INTS = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
CTYPES = {"i8": "char", "i16": "short", "i32": "int", "i64": "long",
          "u8": "uchar", "u16": "ushort", "u32": "uint", "u64": "ulong"}
#: Writes every scalar where the test can read its bits: the ints into out, the floats into f.
ALL = Kernel(
    "all_scalars",
    [Buffer("out", "i64"), Buffer("f", "f64"), *[Scalar(f"s{d}", d) for d in INTS],
     Scalar("a", "f32"), Scalar("b", "f64")],
    {"opencl": "__kernel void all_scalars(__global long* out, __global double* f, "
     + ", ".join(f"{CTYPES[d]} s{d}" for d in INTS) + ", float a, double b) {\n"
     + "if (get_global_id(0) == 0) {\n"
     + "".join(f"out[{i}] = (long)s{d};\n" for i, d in enumerate(INTS))
     + "f[0] = (double)a; f[1] = b; f[2] = (double)get_global_size(0); }\n}"},
    cube_dim=4,
)
AXPY = Kernel(
    "axpy_native",
    [Buffer("x", "f32", "read"), Buffer("y", "f32"), Scalar("a", "f32"), Scalar("n", "u32")],
    {"opencl": "__kernel void axpy_native(__global const float* x, __global float* y, float a, uint n) "
               "{ uint i = get_global_id(0); if (i < n) y[i] += a * x[i]; }"},
    cube_dim=16,
)
HALF = Kernel(  # an f16 or bool scalar: never taken by the launcher
    "flag_native", [Buffer("y", "i32"), Scalar("on", "bool")],
    {"opencl": "__kernel void flag_native(__global int* y, uchar on) { y[get_global_id(0)] = on ? 7 : 1; }"},
    cube_dim=4,
)


def native_or_skip() -> Any:
    module = launch_path.load()
    if module is None:
        if os.environ.get("CUBEPLUG_REQUIRE_NATIVE_LAUNCH") == "1":
            pytest.fail(f"the compiled launcher is required here: {launch_path.status()}")
        pytest.skip(f"the compiled launcher is not in use: {launch_path.status()}")
    return module


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    """A client with the launcher and one without, on the device under test."""
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    native_or_skip()
    fast = make_client()
    slow = make_client(opencl={"native_launch": False})
    yield fast, slow
    fast.close()
    slow.close()


def test_the_launcher_stands_in_for_both_launch_methods(pair: tuple[Any, Any]) -> None:
    module = native_or_skip()
    fast, slow = pair
    launcher = fast.launcher
    assert type(launcher.launch) is module.Launcher and type(launcher.launch_unchecked) is module.Launcher
    assert type(slow.launcher) is Launcher  # the core's launcher, in Python
    assert "launch" not in fast.__dict__ and "launch_unchecked" not in fast.__dict__  # nothing patched
    assert launch_path.status().startswith("in use")


def test_native_launch_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="native_launch must be true or false"):
        make_client(opencl={"native_launch": "yes"})


def _run(client: Any, steps: list[tuple[Any, ...]]) -> list[Any]:
    """Each step's outcome: the error's type and text, or the bits the kernel wrote."""
    align = client.server.memory_properties.alignment
    out = client.create(np.zeros(align // 8 + 16, np.int64))
    f = client.create(np.zeros(align // 8 + 16, np.float64))
    views = {False: (out, f), True: (out.offset_start(align), f.offset_start(align)),
             "odd": (out.offset_start(4), f.offset_start(4))}
    outcomes: list[Any] = []
    for checked, count, values, view in steps:
        o, fv = views[view]
        launch = client.launch if checked else client.launch_unchecked
        try:
            launch(ALL, count, [o, fv], values)
        except (ValidationError, LaunchError) as e:
            outcomes.append((type(e).__name__, str(e)))
            continue
        ints = client.to_numpy(o, "i64")[:8].tolist()
        floats = client.to_numpy(fv, "f64")[:3]
        outcomes.append((ints, floats.tobytes()))
    return outcomes


def _int_values(dtype: str) -> st.SearchStrategy[Any]:
    info = np.iinfo(DTYPES[dtype])
    inside = st.integers(int(info.min), int(info.max))
    edges = st.sampled_from([int(info.min), int(info.max), 0, int(info.max) + 1, int(info.min) - 1])
    return st.one_of(inside, edges, st.just(True), st.builds(np.dtype(info.dtype).type, inside))


FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 3.4028234663852886e38, 3.5e38, -3.5e38, 1e-45, 1.5]),
    st.integers(-5, 5),
    st.builds(np.float32, st.floats(-1e6, 1e6)),
)
COUNTS = st.one_of(
    st.integers(0, 3), st.tuples(st.integers(0, 2), st.integers(1, 2)),
    st.builds(CubeCount, st.integers(0, 3)), st.just(2.0),
)
STEP = st.tuples(
    st.booleans(),
    COUNTS,
    st.tuples(*[_int_values(d) for d in INTS], FLOATS, FLOATS).map(list),
    st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=6), repeat=st.booleans())
def test_every_launch_gives_what_the_python_path_gives(
    pair: tuple[Any, Any], steps: list[tuple[Any, ...]], repeat: bool
) -> None:
    fast, slow = pair
    if repeat:  # the same values again: the launcher keeps them set, unless a float is zero
        steps = steps + steps[-1:]
    assert _run(fast, steps) == _run(slow, steps)


I_OK = [-128, -32768, -(2**31), -(2**63), 255, 65535, 2**32 - 1, 2**64 - 1]
SAMPLES = [
    # a zero float is set again every time (0.0 == -0.0, but their bits differ)
    [(True, 1, [*I_OK, 0.0, 0.0], False), (True, 1, [*I_OK, -0.0, -0.0], False)],
    [(False, 1, [*I_OK, -0.0, 0.0], False), (False, 1, [*I_OK, 0.0, -0.0], False)],
    # the same values on another binding, then an unaligned view (refused when checked)
    [(True, 2, [*I_OK, 1.5, 2.5], False), (True, 2, [*I_OK, 1.5, 2.5], True),
     (True, 2, [*I_OK, 1.5, 2.5], "odd"), (True, 1, [*I_OK, 1.5, 2.5], False)],
    # f32 rounding, the extremes of every int, one past them
    [(True, 1, [*I_OK, 1e-45, 1.7976931348623157e308], False),
     (True, 1, [*I_OK[:7], 2**64, 1.0, 1.0], False), (False, 1, [*I_OK[:7], 2**64, 1.0, 1.0], False)],
]


@pytest.mark.parametrize("steps", SAMPLES)
def test_chosen_launches_give_what_the_python_path_gives(pair: tuple[Any, Any], steps: list[Any]) -> None:
    fast, slow = pair
    assert _run(fast, steps) == _run(slow, steps)


def test_plain_launches_take_the_c_path_and_the_rest_go_to_python(pair: tuple[Any, Any]) -> None:
    fast, _ = pair
    x = fast.create(np.arange(64, dtype=np.float32))
    y = fast.create(np.zeros(64, dtype=np.float32))
    launch = fast.launcher.launch
    launch(AXPY, 4, [x, y], [1.0, 64])  # the first launch of a kernel goes to Python, then it is known
    before = launch.fast_launches
    launch(AXPY, 4, [x, y], [1.0, 64])
    launch(AXPY, (4,), (x, y), (1.0, 64))
    launch(AXPY, CubeCount(4, 1, 1), [x, y], [1.0, 64])
    assert launch.fast_launches == before + 3
    cubes = fast.create(np.array([4, 1, 1], np.uint32))
    fell_back = [
        lambda: launch(AXPY, 4, buffers=[x, y], scalars=[1.0, 64]),  # keywords
        lambda: launch(AXPY, 4, [x, y], [np.float32(1.0), 64]),  # a numpy scalar (converted by Python)
        lambda: launch(AXPY, 4, [x, y], [1, 64]),  # an int for a float: converted by Python
        lambda: launch(AXPY, 0, [x, y], [1.0, 64]),  # an empty count: nothing runs
        lambda: launch(AXPY, CubeCount.dynamic(cubes), [x, y], [1.0, 64]),  # a count read on the device
    ]
    for call in fell_back:
        call()
    assert launch.fast_launches == before + 3
    expected = np.arange(64, dtype=np.float32) * 8  # every launch but the empty one added x once
    assert fast.to_numpy(y, "f32").tolist() == expected.tolist()


def test_a_handle_of_another_client_is_refused_as_in_python(pair: tuple[Any, Any]) -> None:
    fast, slow = pair
    x = fast.create(np.zeros(64, np.float32))
    fast.launch(AXPY, 4, [x, x], [1.0, 64])
    foreign = slow.create(np.zeros(64, np.float32))
    with pytest.raises(ValidationError, match="another client"):
        fast.launch(AXPY, 4, [x, foreign], [1.0, 64])
    dropped = fast.create(np.zeros(64, np.float32))
    dropped.drop()
    with pytest.raises(ValidationError, match="dropped"):
        fast.launch(AXPY, 4, [x, dropped], [1.0, 64])
    fast.launch(AXPY, 4, [x, x], [1.0, 64])  # the client goes on


def test_a_kernel_with_a_bool_scalar_always_goes_to_python(pair: tuple[Any, Any]) -> None:
    fast, _ = pair
    y = fast.empty(16)
    launch = fast.launcher.launch
    before = launch.fast_launches
    for on in (True, False, True):
        launch(HALF, 1, [y], [on])
    assert launch.fast_launches == before
    assert fast.to_numpy(y, "i32").tolist() == [7, 7, 7, 7]


def test_threads_launching_on_their_own_streams_get_exact_results(pair: tuple[Any, Any]) -> None:
    fast, _ = pair
    n, rounds = 64, 300
    ones = fast.create(np.ones(n, np.float32))
    fast.launch(AXPY, 4, [ones, fast.create(np.zeros(n, np.float32))], [1.0, n])
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            x = fast.create(np.ones(n, np.float32))
            y = fast.create(np.zeros(n, np.float32))
            for i in range(rounds):  # each thread sets its own scalar on the shared kernel
                fast.launch(AXPY, 4, [x, y], [float(k + 1), n - (i % 2)])
            fast.launch(AXPY, 4, [ones, y], [0.5, n])  # memory of the main thread's stream
            results[k] = fast.to_numpy(y, "f32")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    for k, y in results.items():
        expect = np.full(n, (k + 1) * rounds + 0.5, np.float32)
        expect[-1] = (k + 1) * rounds // 2 + 0.5
        assert y.tolist() == expect.tolist(), k


def test_a_driver_error_in_c_is_reported_as_python_reports_it(
    pair: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C enqueue fails (a stand-in returning CL_INVALID_WORK_GROUP_SIZE); the launcher enqueues
    again through PyOpenCL, whose error becomes the LaunchError that Python gives."""
    module = native_or_skip()
    import pyopencl as cl

    fast, _ = pair
    x = fast.create(np.ones(64, np.float32))
    y = fast.create(np.zeros(64, np.float32))
    fast.launch(AXPY, 4, [x, y], [1.0, 64])
    calls: list[int] = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 2, ctypes.c_uint32,
                             *[ctypes.c_void_p] * 3, ctypes.c_uint32, *[ctypes.c_void_p] * 2)
    failing = proto(lambda *a: calls.append(1) or -54)
    lib = launch_path.opencl_library()
    assert lib is not None
    real = ctypes.cast(lib.clEnqueueNDRangeKernel, ctypes.c_void_p).value
    set_arg = ctypes.cast(lib.clSetKernelArg, ctypes.c_void_p).value
    lp = launch_path

    def init(enqueue: Any) -> None:
        types = (lp.Handle, lp.SliceToken, lp.StorageHandle, lp.StreamState, lp.CubeCount)
        module.init(*types, enqueue, set_arg)

    init(ctypes.cast(failing, ctypes.c_void_p).value)
    try:
        fast.launch(AXPY, 4, [x, y], [1.0, 64])  # PyOpenCL's enqueue succeeds: the launch ran once
        assert calls == [1] and fast.to_numpy(y, "f32").tolist() == [2.0] * 64
        server = fast.server

        def refuse(queue: Any, kernel: Any, size: Any, local: Any) -> None:
            raise cl.LogicError("clEnqueueNDRangeKernel failed: INVALID_WORK_GROUP_SIZE")

        monkeypatch.setattr(server, "_enqueue", refuse)
        with pytest.raises(LaunchError, match=r"axpy_native.*\(64, 1, 1\) units.*INVALID_WORK_GROUP_SIZE"):
            fast.launch(AXPY, 4, [x, y], [1.0, 64])
    finally:
        init(real)
    monkeypatch.undo()
    fast.launch(AXPY, 4, [x, y], [1.0, 64])  # bindings were forgotten: set again, and right
    assert fast.to_numpy(y, "f32").tolist() == [3.0] * 64


def test_a_closed_client_refuses_a_launcher_kept_from_before() -> None:
    native_or_skip()
    client = make_client()
    x = client.create(np.ones(64, np.float32))
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    kept = client.launcher.launch
    client.close()
    assert kept.closed and "launch" not in client.__dict__
    with pytest.raises(ValidationError, match="was closed"):
        kept(AXPY, 4, [x, x], [1.0, 64])
    with pytest.raises(ValidationError, match="was closed"):
        client.launch(AXPY, 4, [x, x], [1.0, 64])


def test_a_client_with_the_launcher_is_freed_without_the_collector() -> None:
    native_or_skip()
    client = make_client()
    x = client.create(np.ones(64, np.float32))
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    client.sync()
    ref = weakref.ref(client)
    server_ref = weakref.ref(client.server)
    gc.disable()
    try:
        del x, client
        assert ref() is None and server_ref() is None, "a reference cycle keeps the client alive"
    finally:
        gc.enable()


def test_a_launcher_kept_after_its_client_is_gone_refuses_every_call() -> None:
    """The launcher holds its client weakly (no reference cycle): once the client is gone, the
    common case raises too, with the fix in the message, instead of some calls working."""
    native_or_skip()
    client = make_client()
    x = client.create(np.ones(64, np.float32))
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    kept = client.launcher.launch
    del client
    gc.collect()
    for count in (4, 0):  # the C path's case, and one it hands to Python
        with pytest.raises(ReferenceError, match="keep a reference to the client"):
            kept(AXPY, count, [x, x], [1.0, 64])


def test_a_subclass_that_overrides_launch_is_called_every_time() -> None:
    module = native_or_skip()
    from cubeplug.core.client import ComputeClient

    calls: list[int] = []

    class Counting(ComputeClient):
        def launch(self, *args: Any, **kwargs: Any) -> None:
            calls.append(1)
            super().launch(*args, **kwargs)

    base = make_client()
    client = Counting(base.server)
    x = client.create(np.ones(64, np.float32))
    for _ in range(3):
        client.launch(AXPY, 4, [x, x], [1.0, 64])
    assert len(calls) == 3 and "launch" not in client.__dict__
    assert type(client.launcher.launch_unchecked) is module.Launcher  # the launcher in C behind it
    assert client.to_numpy(x, "f32").tolist() == [8.0] * 64
    client.close()


def test_launchers_and_entries_are_initialised_once_and_close_lets_go_of_the_streams() -> None:
    module = native_or_skip()
    client = make_client()
    x = client.create(np.ones(64, np.float32))
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    client.launch(AXPY, 4, [x, x], [1.0, 64])
    launcher = client.launcher.launch
    slots = client.server.multistream.streams.slots  # the stream states, with their queues
    assert any(r is slots for r in gc.get_referents(launcher))
    with pytest.raises(TypeError, match="initialised once"):
        launcher.__init__(weakref.ref(client), None, threading.RLock(), None, client.server, [], 1, {}, None)
    tables = client.server._natives.plans  # the plans, and the launchers' entries
    entry = next(v for table in tables for v in table.values() if type(v) is module.Entry)
    assert type(entry) is module.Entry
    with pytest.raises(TypeError, match="initialised once"):
        entry.__init__(None, (1, 1, 1), (), (), (), (), 1, True, [], [], {}, None, None)
    module.Launcher.__new__(module.Launcher).close()  # an uninitialised one too
    del entry
    client.close()
    assert not any(r is slots for r in gc.get_referents(launcher)), "a kept launcher holds no queue"
    with pytest.raises(ValidationError, match="was closed"):
        launcher(AXPY, 4, [x, x], [1.0, 64])
