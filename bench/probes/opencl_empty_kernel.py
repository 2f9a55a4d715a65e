"""Probe: which trivial kernels NVIDIA's OpenCL compiler accepts (ptxas rejects some empty ones)."""

import pyopencl as cl

for platform in cl.get_platforms():
    for device in platform.get_devices():
        ctx = cl.Context([device])
        for src in ("__kernel void k() {}", "__kernel void k(__global int* a) {}",
                    "__kernel void k() { barrier(CLK_LOCAL_MEM_FENCE); }", "__kernel void k() { ; }"):
            for opts in ([], ["-cl-kernel-arg-info"], ["-cl-std=CL1.2"]):
                try:
                    cl.Program(ctx, src).build(options=opts)
                    ok = "ok"
                except Exception as e:
                    ok = "FAIL " + str(e).splitlines()[0][:80]
                print(f"{device.name[:20]:20} {src:55} {' '.join(opts):22} {ok}")
