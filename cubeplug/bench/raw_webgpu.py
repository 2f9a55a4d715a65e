"""wgpu baselines on the client's GPUDevice: batched dispatches, buffers, queue transfers and copies."""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.bench.raw import MIB, TINY_N, RawLibrary, host_seconds
from cubeplug.bench.timing import Figure, per_call

_SHADER = """
struct S { a: f32, n: u32 }
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> s: S;
@compute @workgroup_size(64)
fn tiny(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < s.n) { x[gid.x] = x[gid.x] * s.a + 1.0; }
}
"""


class WgpuRaw(RawLibrary):
    """Raw wgpu: one encoder of many dispatches, create_buffer, write_buffer / read_buffer, copies."""

    timing = "host"
    alloc_call = "GPUDevice.create_buffer + destroy"

    def __init__(self, client: Any) -> None:
        import wgpu

        self.wgpu = wgpu
        self.library = f"wgpu {wgpu.__version__}"
        device = getattr(client.server, "gpu", None)
        if device is None:
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
            device = adapter.request_device_sync()
        self.device: Any = device
        u = wgpu.BufferUsage
        self.usage = u.STORAGE | u.COPY_SRC | u.COPY_DST
        module = self.device.create_shader_module(code=_SHADER)
        self.pipeline = self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "tiny"}
        )
        self.x = self.device.create_buffer(size=4 * TINY_N, usage=self.usage)
        params = np.zeros(2, np.uint32)
        params.view(np.float32)[0] = 1.0
        params[1] = TINY_N
        self.params = self.device.create_buffer_with_data(data=params, usage=u.STORAGE)
        self.bind_group = self.device.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[
                {"binding": 0, "resource": {"buffer": self.x, "offset": 0, "size": 4 * TINY_N}},
                {"binding": 1, "resource": {"buffer": self.params, "offset": 0, "size": 8}},
            ],
        )
        self._buffers: dict[tuple[str, int], Any] = {}

    def _buffer(self, tag: str, nbytes: int) -> Any:
        key = (tag, nbytes)
        if key not in self._buffers:
            self._buffers[key] = self.device.create_buffer(size=nbytes, usage=self.usage)
        return self._buffers[key]

    def wait(self) -> None:
        """Block until the queue ran everything submitted (a 4-byte read back)."""
        self.device.queue.read_buffer(self.x, 0, 4)

    def batch(self, k: int) -> None:
        """``k`` dispatches of the tiny kernel in one pass of one encoder, one submit, state set
        once: the API's floor for many small launches."""
        device = self.device
        enc = device.create_command_encoder()
        p = enc.begin_compute_pass()
        p.set_pipeline(self.pipeline)
        p.set_bind_group(0, self.bind_group)
        dispatch = p.dispatch_workgroups
        for _ in range(k):
            dispatch(1)
        p.end()
        device.queue.submit([enc.finish()])

    def launch(self, n: int, repeats: int) -> Figure:
        """``n`` dispatches in one pass of one encoder, one submit, state set once (the API's floor)."""
        return per_call(self.batch, n, repeats, self.wait)

    def alloc(self, n: int, repeats: int) -> Figure:
        """``create_buffer(1 MiB)`` and ``destroy``."""
        create, usage = self.device.create_buffer, self.usage

        def calls(k: int) -> None:
            for _ in range(k):
                create(size=MIB, usage=usage).destroy()

        return per_call(calls, n, repeats, lambda: None)

    def upload(self, host: np.ndarray, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``queue.write_buffer`` (WebGPU has no pinned host memory: no staged figure)."""
        if staged:
            return None
        dst = self._buffer("up", host.nbytes)
        write = self.device.queue.write_buffer
        return host_seconds(lambda: write(dst, 0, host), self.wait, iters, repeats)

    def download(self, nbytes: int, staged: bool, iters: int, repeats: int) -> Figure | None:
        """``queue.read_buffer`` (no staged figure)."""
        if staged:
            return None
        src = self._buffer("up", nbytes)
        read = self.device.queue.read_buffer
        return host_seconds(lambda: read(src), lambda: None, iters, repeats)

    def copy(self, nbytes: int, iters: int, repeats: int) -> Figure:
        """``copy_buffer_to_buffer``, ``iters`` in one encoder."""
        src, dst = self._buffer("src", nbytes), self._buffer("dst", nbytes)
        device = self.device

        def run() -> None:
            enc = device.create_command_encoder()
            for _ in range(iters):
                enc.copy_buffer_to_buffer(src, 0, dst, 0, nbytes)
            device.queue.submit([enc.finish()])

        return host_seconds(run, self.wait, 1, repeats).scaled(iters)

    def close(self) -> None:
        """Destroy the buffers."""
        for buf in self._buffers.values():
            buf.destroy()
        self._buffers.clear()
