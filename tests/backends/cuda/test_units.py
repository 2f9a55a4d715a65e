"""Unit tests of the CUDA backend's pure parts: options, layouts, argument packing, staging, futures."""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

from cubeplug import Buffer, ConfigError, Kernel, LaunchError, Scalar
from cubeplug.backends.cuda.compiler import first_error, source_for
from cubeplug.backends.cuda.device import current_device_kept, on_device
from cubeplug.backends.cuda.launch import SLOT_CODES, arg_layout, arrange
from cubeplug.backends.cuda.layout import optimal_row_align, pitched_rows, pitched_strides
from cubeplug.backends.cuda.options import CudaOptions, parse_bytes, parse_options
from cubeplug.backends.cuda.staging import MIN_BLOCK, PinnedBuffer, PinnedPool, size_class
from cubeplug.core.hostmem import host_address
from cubeplug.core.kernel import DTYPES
from cubeplug.plugin import Completer, EventFuture
from tests.backends.cuda import fake_cupy


# ---------------------------------------------------------------------- options
def test_options_defaults_and_parsing() -> None:
    assert parse_options({}) == CudaOptions()
    opts = parse_options(
        {
            "max_page_size": "2GiB",
            "pitch_alignment": 256,
            "launch": "cupy",
            "pinned_pool_bytes": "1MiB",
            "staging_max_bytes": 4096,
        }
    )
    assert opts.page_size(80 << 30) == 2 << 30
    assert (opts.pitch_alignment, opts.launch, opts.pinned_pool_bytes, opts.staging_max_bytes) == (
        256,
        "cupy",
        1 << 20,
        4096,
    )
    assert parse_options({"max_page_size": "10%"}).page_size(100 << 30) == 10 << 30
    assert CudaOptions().page_size(8 << 30) == 2 << 30
    assert parse_bytes("1.5 KiB", "k") == 1536


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"nope": 1}, "nope"),
        ({"max_page_size": "0%"}, "max_page_size"),
        ({"max_page_size": 1024}, "max_page_size"),
        ({"pitch_alignment": 100}, "pitch_alignment"),
        ({"pitch_alignment": True}, "pitch_alignment"),
        ({"launch": "fast"}, "launch"),
        ({"pinned_pool_bytes": "lots"}, "pinned_pool_bytes"),
        ({"staging_max_bytes": -1}, "staging_max_bytes"),
    ],
)
def test_bad_options_name_the_key(raw, key) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        parse_options(raw)
    assert info.value.key == key and "[backends.cuda]" in str(info.value)


# ---------------------------------------------------------------------- pitched layout
@pytest.mark.parametrize(
    "width, itemsize, expect",
    [
        (1, 4, 4),
        (3, 4, 16),
        (4, 4, 16),
        (5, 4, 32),
        (100, 4, 512),
        (1000, 4, 512),
        (2, 1, 16),
        (33, 8, 512),
    ],
)
def test_optimal_row_align_matches_cubecl(width, itemsize, expect) -> None:  # type: ignore[no-untyped-def]
    assert optimal_row_align(width, itemsize, 512) == expect


def test_pitched_strides() -> None:
    assert pitched_strides((5, 100), 4, 512) == (128, 1)
    assert pitched_strides((2, 3, 5), 2, 512) == (24, 8, 1)
    assert pitched_strides((7, 1), 8, 512) == (1, 1)
    assert pitched_strides((4, 128), 4, 512) == (128, 1)
    assert pitched_strides((10,), 4, 512) == (1,)
    assert pitched_strides((5, 100), 4, 0) == (100, 1)
    assert pitched_strides((5, 100), 4, 256) == (128, 1)
    assert pitched_strides((3, 1000), 4, 256) == (1024, 1)
    assert pitched_strides((0, 3), 4, 512) == (4, 1)


def test_pitched_rows() -> None:
    rows = pitched_rows((5, 100), (128, 1), 4)
    assert rows is not None and (rows.width, rows.height, rows.pitch, rows.nbytes) == (400, 5, 512, 2000)
    rows3 = pitched_rows((2, 3, 5), (24, 8, 1), 2)
    assert rows3 is not None and (rows3.width, rows3.height, rows3.pitch) == (10, 6, 16)
    assert pitched_rows((5, 100), (100, 1), 4) is None  # contiguous
    assert pitched_rows((0, 3), (4, 1), 4) is None  # empty
    assert pitched_rows((3, 4), (1, 3), 4) is None  # not row-major
    assert pitched_rows((2, 3, 5), (99, 8, 1), 2) is None  # not pitched row-major


# ---------------------------------------------------------------------- arguments
KERNEL = Kernel(
    "k",
    [Scalar("a", "f64"), Buffer("x", "f32"), Scalar("b", "i8"), Buffer("y", "u8"), Scalar("c", "f16")],
    {"c": ""},
)


def test_arg_layout_keeps_declared_order() -> None:
    layout = arg_layout(KERNEL)
    assert layout.order == (2, 0, 3, 1, 4) and layout.nargs == 5
    assert arrange(layout, [100, 200], [1.5, -3, 0.5]) == [1.5, 100, -3, 200, 0.5]
    plain = arg_layout(Kernel("p", [Buffer("x", "f32"), Scalar("n", "u32")], {"c": ""}))
    assert plain.order is None
    values = [7]
    assert arrange(plain, values, []) is values


@pytest.mark.parametrize("dt", sorted(DTYPES))
def test_slot_codes_fill_eight_bytes_and_round_trip(dt) -> None:  # type: ignore[no-untyped-def]
    code = struct.Struct("<" + SLOT_CODES[dt])
    assert code.size == 8
    value = DTYPES[dt].type(1)
    raw = code.pack(value)
    assert np.frombuffer(raw[: DTYPES[dt].itemsize], dtype=DTYPES[dt].newbyteorder("<"))[0] == value


def _fake_driver(monkeypatch: pytest.MonkeyPatch, result: int = 0) -> list[tuple]:  # type: ignore[type-arg]
    calls: list[tuple] = []  # type: ignore[type-arg]

    class Handle(int):
        pass

    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # type: ignore[no-untyped-def]
        slots = (ctypes.c_void_p * 5).from_address(params)
        raw = [ctypes.string_at(slots[i], 8) for i in range(5)]
        calls.append(((gx, gy, gz), (bx, by, bz), shared, stream, raw, extra))
        return (result,)

    driver = types.ModuleType("cuda.bindings.driver")
    driver.cuLaunchKernel = launch  # type: ignore[attr-defined]
    driver.CUfunction = Handle  # type: ignore[attr-defined]
    driver.CUstream = Handle  # type: ignore[attr-defined]
    driver.cuGetErrorName = lambda e: (0, b"CUDA_ERROR_INVALID_VALUE")  # type: ignore[attr-defined]
    driver.cuGetErrorString = lambda e: (0, b"invalid argument")  # type: ignore[attr-defined]
    bindings = types.ModuleType("cuda.bindings")
    bindings.driver = driver  # type: ignore[attr-defined]
    cuda = types.ModuleType("cuda")
    cuda.bindings = bindings  # type: ignore[attr-defined]
    for name, mod in {"cuda": cuda, "cuda.bindings": bindings, "cuda.bindings.driver": driver}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_driver_launcher_packs_every_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.backends.cuda import launch
    from cubeplug.backends.cuda.launch import DriverLauncher

    calls = _fake_driver(monkeypatch)
    monkeypatch.setattr(launch, "cupy_launch_kernel", lambda: None)  # the cuda-python fallback
    launcher = DriverLauncher(0xABC, (32, 2, 1), arg_layout(KERNEL))
    assert launcher.binding == "cuda-python"
    stream = types.SimpleNamespace(ptr=77)
    f64, i8, f16 = np.float64(2.5), np.int8(-3), np.float16(0.5)
    launcher(stream, (4, 1, 1), [0x1000, 0x2000], [f64, i8, f16])
    launcher(stream, (8, 2, 1), [0x3000, 0x4000], [np.float64(-1), np.int8(5), np.float16(2)])
    (grid, block, shared, s, raw, extra), second = calls
    assert (grid, block, shared, int(s), extra) == ((4, 1, 1), (32, 2, 1), 0, 77, 0)
    assert struct.unpack("<d", raw[0])[0] == 2.5
    assert struct.unpack("<Q", raw[1])[0] == 0x1000
    assert struct.unpack("<b", raw[2][:1])[0] == -3
    assert struct.unpack("<Q", raw[3])[0] == 0x2000
    assert struct.unpack("<e", raw[4][:2])[0] == 0.5
    assert struct.unpack("<Q", second[4][3])[0] == 0x4000 and second[0] == (8, 2, 1)


def test_driver_launcher_maps_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.backends.cuda import launch
    from cubeplug.backends.cuda.launch import DriverLauncher, DriverLaunchError

    _fake_driver(monkeypatch, result=1)
    monkeypatch.setattr(launch, "cupy_launch_kernel", lambda: None)
    launcher = DriverLauncher(1, (1, 1, 1), arg_layout(KERNEL))
    stream = types.SimpleNamespace(ptr=1)
    with pytest.raises(DriverLaunchError, match="CUDA_ERROR_INVALID_VALUE"):
        launcher(stream, (1, 1, 1), [0, 0], [np.float64(0), np.int8(0), np.float16(0)])


# ---------------------------------------------------------------------- staging pool
class FakeEvent:
    def __init__(self, done: bool = False) -> None:
        self._done = done
        self.waited = 0

    @property
    def done(self) -> bool:
        return self._done

    def synchronize(self) -> None:
        self.waited += 1
        self._done = True


class FakeHost:
    def __init__(self) -> None:
        self.live: dict[int, ctypes.Array] = {}  # type: ignore[type-arg]
        self.allocs = 0

    def alloc(self, n: int) -> int:
        buf = (ctypes.c_ubyte * n)()
        self.live[ctypes.addressof(buf)] = buf
        self.allocs += 1
        return ctypes.addressof(buf)

    def free(self, ptr: int) -> None:
        del self.live[ptr]


def test_size_classes() -> None:
    assert size_class(0) == MIN_BLOCK and size_class(1) == MIN_BLOCK and size_class(4097) == 8192
    assert size_class(1 << 20) == 1 << 20


def test_pool_reuses_blocks_only_after_their_event() -> None:
    host = FakeHost()
    pool = PinnedPool(host.alloc, host.free, max_bytes=1 << 20)
    a = pool.take(100)
    busy = FakeEvent()
    pool.give(a, busy)
    b = pool.take(100)
    assert b is not a and host.allocs == 2  # a is still in flight
    busy._done = True
    pool.give(b)
    assert pool.take(50) is a  # oldest first, its event completed
    assert pool.contains(a.ptr + 10, 100) and not pool.contains(a.ptr + 4090, 100)
    assert pool.reserved == 2 * MIN_BLOCK


def test_pool_waits_instead_of_growing_past_its_cap() -> None:
    host = FakeHost()
    pool = PinnedPool(host.alloc, host.free, max_bytes=MIN_BLOCK)
    a = pool.take(10)
    event = FakeEvent()
    pool.give(a, event)
    assert pool.take(10) is a and event.waited == 1 and host.allocs == 1


def test_pool_trim_and_close() -> None:
    host = FakeHost()
    pool = PinnedPool(host.alloc, host.free)
    blocks = [pool.take(10) for _ in range(3)]
    pool.give(blocks[0])
    pool.give(blocks[1], FakeEvent(done=False))
    assert pool.trim() == MIN_BLOCK and len(host.live) == 2
    pool.close()
    assert host.live == {} and pool.reserved == 0


def test_pinned_buffer_returns_to_the_pool() -> None:
    host = FakeHost()
    pool = PinnedPool(host.alloc, host.free, max_bytes=1 << 20)
    arr = PinnedBuffer(pool, 1000).array()
    assert arr.shape == (1000,) and arr.dtype == np.uint8
    arr[:] = 7
    assert pool.contains(arr.ctypes.data, 1000)
    view = arr[10:20]
    del arr
    assert pool.idle_bytes() == 0  # the slice keeps the buffer alive
    del view
    assert pool.idle_bytes() == MIN_BLOCK
    big = PinnedBuffer(pool, 1 << 19).array()  # beyond a quarter of the cap: its own allocation
    ptr = big.ctypes.data
    del big
    assert ptr not in host.live


def test_host_address() -> None:
    arr = np.arange(10, dtype=np.uint8)
    assert host_address(memoryview(arr)) == arr.ctypes.data
    assert host_address(memoryview(b"")) == 0


# ---------------------------------------------------------------------- compiler helpers
def test_first_error_reads_nvrtc_logs() -> None:
    log = (
        '/tmp/x/abc.cu(42): warning #1: something\n/tmp/x/abc.cu(57): error: identifier "zz" is undefined\n'
        "/tmp/x/abc.cu(60): error: later\n2 errors detected"
    )
    assert first_error(log) == (57, 'identifier "zz" is undefined')
    assert first_error("abc.cu(3): catastrophic error: cannot open source file") == (
        3,
        "cannot open source file",
    )
    assert first_error("nvrtc: something odd\n") == (None, "nvrtc: something odd")
    assert first_error("") == (None, "NVRTC reported an error with an empty log")


def test_source_for_prepends_the_prelude_and_defines() -> None:
    k = Kernel(
        "k",
        [Buffer("x", "f16")],
        {"c": "KERNEL k(GLOBAL half* x) {}", "cuda": "NATIVE"},
        defines={"N": 4},
        cube_dim=(8, 2),
    )
    c = source_for(k, "c")
    assert "#include <cuda_fp16.h>" in c and '#define KERNEL extern "C" __global__ void' in c
    assert (
        "#define N 4" in c
        and "#define CUBE_DIM_STATIC_Y 2" in c
        and c.endswith("KERNEL k(GLOBAL half* x) {}")
    )
    native = source_for(k, "cuda")
    assert "#define N 4" in native and "KERNEL" not in native and native.endswith("NATIVE")


# ---------------------------------------------------------------------- futures
def test_event_future_resolves_once_from_either_side() -> None:
    finished = []
    event = FakeEvent()

    def finish() -> int:
        finished.append(1)
        return 42

    fut: EventFuture[int] = EventFuture(event, finish, lambda e: e.synchronize())
    completer = Completer()
    completer.submit(fut)
    assert fut.result(timeout=10) == 42
    fut.resolve()
    completer.close()
    assert finished == [1] and event.waited == 1


def test_event_future_carries_errors_and_callbacks() -> None:
    def boom() -> int:
        raise LaunchError("device said no")

    fut: EventFuture[int] = EventFuture(None, boom, lambda e: None)
    seen = threading.Event()
    fut.add_done_callback(lambda f: seen.set())
    assert isinstance(fut.exception(), LaunchError)
    assert seen.is_set()
    with pytest.raises(LaunchError):
        fut.result()


# ---------------------------------------------------------------------- plugin
def test_plugin_without_cupy_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from cubeplug.backends.cuda import plugin

    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, p=None: None if n == "cupy" else real(n, p))
    spec = plugin.cubeplug_backends()[0]
    assert spec.name == "cuda" and spec.dialects == ("cuda", "c") and spec.kind == "gpu"
    result = spec.probe()
    assert not result.ok and "CuPy is not installed" in result.reason and "cuda12" in result.reason
    from cubeplug import BackendUnavailableError
    from cubeplug.core.config import Config

    with pytest.raises(BackendUnavailableError, match="CuPy is not installed"):
        plugin.cubeplug_compute_storage("cuda", 0, Config())
    assert plugin.cubeplug_compute_storage("other", 0, Config()) is None
    assert plugin.cubeplug_diagnostics("cuda")["cuda.probe"] == result.reason


def test_backend_modules_do_not_import_cupy() -> None:
    code = (
        "import sys; import cubeplug.backends.cuda.plugin, cubeplug.backends.cuda.server, "
        "cubeplug.backends.cuda.interop; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cuda')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------- the bench, on the fake runtime
def test_bench_runs_end_to_end_on_the_fake(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.util
    import json
    from pathlib import Path

    from tests.backends.cuda import fake_cupy, kernels  # noqa: F401 - registers copy4

    fake_cupy.install(monkeypatch)

    def scale(grid, block, args):  # type: ignore[no-untyped-def]
        x, s, n = args
        fake_cupy.device_view(x, np.float32, min(int(n), 64))[:] *= s  # a sample: the fake is slow

    def spin(grid, block, args):  # type: ignore[no-untyped-def]
        fake_cupy.device_view(args[0], np.float32, grid[0] * block[0])[:] = 1

    monkeypatch.setitem(fake_cupy.KERNELS, "scale", scale)
    monkeypatch.setitem(fake_cupy.KERNELS, "spin", spin)
    path = Path(__file__).parents[3] / "bench" / "bench_cuda.py"
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--launches", "20", "--mib", "4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for step in ("launch", "alloc", "upload", "copy", "streams", "download"):
        assert "error" not in report["results"][step], report["results"][step]
    assert set(report["goals"]) == {
        "launch_ratio<=1.15",
        "alloc_ratio<=1.5",
        "upload_pinned>=0.9",
        "copy_fraction>=0.9",
        "streams_speedup>=2",
        "download_ratio>=0.9",
    }
    assert report["environment"]["device"] == "Fake GPU"
    download = report["results"]["download"]
    assert download["large"]["bytes"] == 4 << 20 and download["2 MiB"]["path"] == "pinned"
    assert set(download) == {"large", "16 MiB", "2 MiB", "seconds"}
    assert download["large"]["cubeplug_read_GBps"] > 0 and download["large"]["cupy_get_GBps"] > 0

    only = tmp_path / "download.json"
    assert bench.main(["--quick", "--only", "download", "--mib", "2", "--json", str(only)]) == 0
    report = json.loads(only.read_text())
    assert set(report["results"]) == {"download"} and set(report["goals"]) == {"download_ratio>=0.9"}


# ---------------------------------------------------------------------- the current device's guards
def test_on_device_undoes_its_own_change_and_current_device_kept_the_bodys(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The two guards differ (cubeplug/backends/cuda/device.py says why): on_device of the current
    device makes one getDevice and no setDevice (the allocation path), and restores what it changed;
    current_device_kept restores what its body changed."""
    rt = fake_cupy.install(monkeypatch)
    rt.devices = 3
    calls: list[str] = []
    get, set_ = rt.getDevice, rt.setDevice
    monkeypatch.setattr(rt, "getDevice", lambda: calls.append("get") or get())
    monkeypatch.setattr(rt, "setDevice", lambda d: calls.append(f"set {d}") or set_(d))
    with on_device(0):
        assert get() == 0
    assert calls == ["get"]  # already current: nothing set, nothing restored
    calls.clear()
    with on_device(2):
        assert get() == 2
    assert get() == 0 and calls == ["get", "set 2", "set 0"]
    with current_device_kept():
        set_(1)  # what each server's guard does inside a round
        set_(2)
    assert get() == 0
    calls.clear()
    with current_device_kept():
        pass
    assert calls == ["get", "get"]
