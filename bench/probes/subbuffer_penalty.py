"""Do kernels on pooled handles run slower than on separate buffers? (issue 19, OpenCL sub-buffers)

    python bench/probes/subbuffer_penalty.py [selector] [--rounds 15] [--reps 3] [--gemm-n 256]
        [--atax-n 2048] [--min-ms 20] [--diagnose] [--json PATH]

    selector: a cubeplug OpenCL selector (default: CUBEPLUG_TEST_OPENCL or opencl:0), e.g.
    ``opencl:portable:0`` (PoCL) or ``opencl:nvidia:0``.

    On the GPU machine (bench/gpu_session.sh says how to prepare; carry .gl, .whl and the cp312
    launcher), from the project's root:
        source .gl/remote-setup.sh && export PYTHONPATH=$PWD:$PYTHONPATH
        python3 bench/probes/subbuffer_penalty.py opencl:nvidia:0 --rounds 31 --diagnose --json $OUT/n.json
        python3 bench/probes/subbuffer_penalty.py opencl:portable:0 --rounds 31 --diagnose --json $OUT/p.json

Two kernels, each in the ``c`` dialect and compiled once by the client (the raw variants launch the
very same ``cl.Program``, so only the binding differs):

- ``gemm``: ``C = A @ B``, n x n f32, one work-item per element of C, 16 x 16 groups;
- ``atax``: ``tmp = A @ x`` then ``y = A.T @ tmp`` (PolyBench's ATAX), n x n f32, two launches.

Variants, timed in paired rounds (each round runs every variant once, in an order rotated per round;
a sample is ``reps`` iterations enqueued back to back, then the queue drained):

- ``separate``: raw PyOpenCL, one ``cl.Buffer`` per array (the reference);
- ``separate_again``: the same on buffers of its own: the control, whose ratio to ``separate`` shows
  how far two runs of one binding differ by chance in this run;
- ``sub``: raw PyOpenCL, one page per page the pool used, of that page's size, and sub-buffers at the
  offsets the pool gave the handles (the page itself at offset 0, as the storage binds it);
- ``pooled``: ``client.launch`` on the client's pooled handles, then ``client.sync()``;
- ``own_pages``: the same on handles made in ``client.persistent_memory()``, each at the start of a
  page of its own (bound as the page itself, no sub-buffer): the issue's comparison within cubeplug;

and with ``--diagnose``, to tell the candidate causes apart:

- ``page_offset``: raw, the page itself bound with the byte offset as a kernel argument (no
  sub-buffer at all; the other binding the issue proposes);
- ``sub_shifted``: raw sub-buffers whose offsets are moved by a different multiple of 4608 B each
  (so that the arrays no longer lie a multiple of 4 KiB apart), in pages of their own;
- ``separate_page``: raw, each array at offset 0 of its own page-sized buffer (an array alone
  in a page, bound whole: what a policy giving such a handle its own page would do).

Each figure is the median over rounds of ms per iteration, with min and the interquartile range;
each ratio is the median over rounds of variant / ``separate`` measured in the same round. The
``binding_ratios`` compare the pairs that differ in the binding alone: ``sub/separate`` (raw
PyOpenCL), ``pooled/own_pages`` (cubeplug's launch path on both sides) and the control
``separate_again/separate``. (``pooled/separate`` also differs in the launch path: on a GPU, where a
256^3 gemm takes microseconds, the launch costs show in it.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

import cubeplug
from cubeplug import Buffer, CubeCount, Kernel, Scalar

GEMM_SRC = """
KERNEL gemm(GLOBAL const float* a, GLOBAL const float* b, GLOBAL float* c, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_Y, j = ABSOLUTE_POS_X;
    if (i >= n || j >= n) return;
    float acc = 0.0f;
    for (unsigned int k = 0; k < n; ++k) acc += a[i * n + k] * b[k * n + j];
    c[i * n + j] = acc;
}
"""
ATAX1_SRC = """
KERNEL atax1(GLOBAL const float* a, GLOBAL const float* x, GLOBAL float* tmp, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_X;
    if (i >= n) return;
    float acc = 0.0f;
    for (unsigned int j = 0; j < n; ++j) acc += a[i * n + j] * x[j];
    tmp[i] = acc;
}
"""
ATAX2_SRC = """
KERNEL atax2(GLOBAL const float* a, GLOBAL const float* tmp, GLOBAL float* y, unsigned int n) {
    unsigned int j = ABSOLUTE_POS_X;
    if (j >= n) return;
    float acc = 0.0f;
    for (unsigned int i = 0; i < n; ++i) acc += a[i * n + j] * tmp[i];
    y[j] = acc;
}
"""
# The same kernels reading each array at a byte offset of the buffer bound (``page_offset``).
OFFSET_SRC = """
#define AT(T, p, o) ((GLOBAL T*)((GLOBAL char*)(p) + (o)))
KERNEL gemm_off(GLOBAL const float* a0, GLOBAL const float* b0, GLOBAL float* c0,
                unsigned long oa, unsigned long ob, unsigned long oc, unsigned int n) {
    GLOBAL const float* a = AT(const float, a0, oa);
    GLOBAL const float* b = AT(const float, b0, ob);
    GLOBAL float* c = AT(float, c0, oc);
    unsigned int i = ABSOLUTE_POS_Y, j = ABSOLUTE_POS_X;
    if (i >= n || j >= n) return;
    float acc = 0.0f;
    for (unsigned int k = 0; k < n; ++k) acc += a[i * n + k] * b[k * n + j];
    c[i * n + j] = acc;
}
KERNEL atax1_off(GLOBAL const float* a0, GLOBAL const float* x0, GLOBAL float* t0,
                 unsigned long oa, unsigned long ox, unsigned long ot, unsigned int n) {
    GLOBAL const float* a = AT(const float, a0, oa);
    GLOBAL const float* x = AT(const float, x0, ox);
    GLOBAL float* tmp = AT(float, t0, ot);
    unsigned int i = ABSOLUTE_POS_X;
    if (i >= n) return;
    float acc = 0.0f;
    for (unsigned int j = 0; j < n; ++j) acc += a[i * n + j] * x[j];
    tmp[i] = acc;
}
KERNEL atax2_off(GLOBAL const float* a0, GLOBAL const float* t0, GLOBAL float* y0,
                 unsigned long oa, unsigned long ot, unsigned long oy, unsigned int n) {
    GLOBAL const float* a = AT(const float, a0, oa);
    GLOBAL const float* tmp = AT(const float, t0, ot);
    GLOBAL float* y = AT(float, y0, oy);
    unsigned int j = ABSOLUTE_POS_X;
    if (j >= n) return;
    float acc = 0.0f;
    for (unsigned int i = 0; i < n; ++i) acc += a[i * n + j] * tmp[i];
    y[j] = acc;
}
"""


def _kernel(name: str, src: str, cube: tuple[int, ...], params: int = 3) -> Kernel:
    bufs = [Buffer("a", "f32", "read"), Buffer("b", "f32", "read"), Buffer("c", "f32", "write")][:params]
    return Kernel(name, [*bufs, Scalar("n", "u32")], {"c": src}, cube_dim=cube)


GEMM = _kernel("gemm", GEMM_SRC, (16, 16))
ATAX1 = _kernel("atax1", ATAX1_SRC, (64,))
ATAX2 = _kernel("atax2", ATAX2_SRC, (64,))
OFFSET_KERNELS = {
    name: Kernel(
        name,
        [
            Buffer("a", "f32", "read"),
            Buffer("b", "f32", "read"),
            Buffer("c", "f32", "write"),
            Scalar("oa", "u64"),
            Scalar("ob", "u64"),
            Scalar("oc", "u64"),
            Scalar("n", "u32"),
        ],
        {"c": OFFSET_SRC},
        cube_dim=cube,
    )
    for name, cube in (("gemm_off", (16, 16)), ("atax1_off", (64,)), ("atax2_off", (64,)))
}
# 4 KiB + 512 B: a multiple of every sub-buffer alignment seen (PoCL 128 B, NVIDIA 512 B).
SHIFT = 4608


class Case:
    """One workload: its steps (kernel, global size, array names), its arrays and its reference result."""

    def __init__(
        self,
        name: str,
        n: int,
        steps: list[tuple[Kernel, tuple[int, ...], list[str]]],
        arrays: dict[str, np.ndarray],
        check: tuple[str, np.ndarray],
    ) -> None:
        self.name, self.n, self.steps, self.arrays, self.check = name, n, steps, arrays, check


def gemm_case(n: int, rng: np.random.Generator) -> Case:
    a = rng.random((n, n), np.float32)
    b = rng.random((n, n), np.float32)
    arrays = {"A": a, "B": b, "C": np.zeros((n, n), np.float32)}
    return Case("gemm", n, [(GEMM, (n, n), ["A", "B", "C"])], arrays, ("C", a @ b))


def atax_case(n: int, rng: np.random.Generator) -> Case:
    a = rng.random((n, n), np.float32)
    x = rng.random(n, np.float32)
    arrays = {"A": a, "x": x, "tmp": np.zeros(n, np.float32), "y": np.zeros(n, np.float32)}
    steps = [(ATAX1, (n,), ["A", "x", "tmp"]), (ATAX2, (n,), ["A", "tmp", "y"])]
    return Case("atax", n, steps, arrays, ("y", a.T @ (a @ x)))


def _groups(size: tuple[int, ...], cube: tuple[int, ...]) -> tuple[int, ...]:
    """Groups per dimension (always 3) for a global ``size`` of 1-3 dimensions."""
    padded = (*size, 1, 1)[:3]
    return tuple(-(-s // c) for s, c in zip(padded, cube, strict=True))


def prepare(client: Any, case: Case, diagnose: bool) -> dict[str, Callable[[int], None]]:
    """The variants of ``case``, each a function running ``reps`` iterations and draining its queue;
    every variant is run once and its result checked against numpy first."""
    import pyopencl as cl

    server = client.server
    storage = server.storage
    ctx = storage.ctx
    # The raw variants use the client's own queue: one queue, as a user mixing both would.
    sid = server.stream_id(cubeplug.core.stream.current_stream_id())
    queue = server.multistream.streams.get(sid).stream
    n = np.uint32(case.n)
    handles = {k: client.create(v) for k, v in case.arrays.items()}
    # What the pool gave each handle: (page id, byte offset in the page), and each page's size.
    region = {k: (h.memory().storage.id, h.memory().storage.offset + h.start) for k, h in handles.items()}
    page_size = {pid: storage.page(pid).size for pid, _ in region.values()}
    launches = []
    for kernel, size, names in case.steps:
        cube = kernel.cube_dim
        launches.append((kernel, CubeCount(*_groups(size, cube)), names, size, cube))
        client.launch(kernel, CubeCount(*_groups(size, cube)), [handles[k] for k in names], [case.n])
    client.sync()

    def program(kernel: Kernel) -> Any:
        client.launcher.compiled_for(kernel)  # built by the launch above
        return client.launcher.compiled_for(kernel).program.kernel.program

    def raw_variant(bufs: dict[str, Any], offsets: dict[str, int] | None = None) -> Callable[[int], None]:
        for k, v in case.arrays.items():
            cl.enqueue_copy(queue, bufs[k], v, dst_offset=(offsets or {}).get(k, 0))
        ks = []
        for kernel, _, names, size, cube in launches:
            if offsets is None:
                k = cl.Kernel(program(kernel), kernel.name)
                k.set_args(*[bufs[a] for a in names], n)
            else:
                off = OFFSET_KERNELS[kernel.name + "_off"]
                if client.launcher.compiled_for(off) is None:  # compile it through the client
                    dummy = [handles[a] for a in names]
                    client.launch(off, CubeCount(*_groups(size, cube)), dummy, [0, 0, 0, case.n])
                    client.sync()
                k = cl.Kernel(program(off), off.name)
                k.set_args(*[bufs[a] for a in names], *[np.uint64(offsets[a]) for a in names], n)
            gsize = tuple(g * c for g, c in zip(_groups(size, cube), cube, strict=True))
            ks.append((k, gsize, cube))

        def run(reps: int, keep: Any = bufs) -> None:  # keep: a kernel does not hold its arguments
            for _ in range(reps):
                for k, g, c in ks:
                    cl.enqueue_nd_range_kernel(queue, k, g, c)
            queue.finish()

        run(1)
        name, want = case.check
        got = np.empty_like(want)
        cl.enqueue_copy(queue, got, bufs[name], src_offset=(offsets or {}).get(name, 0))
        queue.finish()
        np.testing.assert_allclose(got, want, rtol=2e-3)
        return run

    def mem(nbytes: int) -> Any:
        return cl.Buffer(ctx.context, cl.mem_flags.READ_WRITE, nbytes)

    variants: dict[str, Callable[[int], None]] = {}
    variants["separate"] = raw_variant({k: mem(v.nbytes) for k, v in case.arrays.items()})
    # The control: the reference again on buffers of its own, so its ratio is the noise floor.
    variants["separate_again"] = raw_variant({k: mem(v.nbytes) for k, v in case.arrays.items()})
    pages = {pid: mem(size) for pid, size in page_size.items()}

    def subs(shift: int) -> dict[str, Any]:
        own = {pid: mem(size) for pid, size in page_size.items()} if shift else pages
        out = {}
        for i, (k, (pid, off)) in enumerate(region.items()):
            off += i * shift
            out[k] = own[pid] if off == 0 else own[pid].get_sub_region(off, case.arrays[k].nbytes)
        return out

    variants["sub"] = raw_variant(subs(0))

    def through_client(hs: dict[str, Any]) -> Callable[[int], None]:
        def run(reps: int) -> None:
            for _ in range(reps):
                for kernel, count, names, _, _ in launches:
                    client.launch(kernel, count, [hs[k] for k in names], [case.n])
            client.sync()

        run(1)
        name, want = case.check
        np.testing.assert_allclose(client.to_numpy(hs[name], "f32", want.shape), want, rtol=2e-3)
        return run

    variants["pooled"] = through_client(handles)
    # The same client and launch path, each array alone at the start of a page of its own.
    with client.persistent_memory():
        own = {k: client.create(v) for k, v in case.arrays.items()}
    variants["own_pages"] = through_client(own)
    if diagnose:
        offset_pages = {pid: mem(size) for pid, size in page_size.items()}
        bound = {k: offset_pages[pid] for k, (pid, _) in region.items()}
        variants["page_offset"] = raw_variant(bound, {k: off for k, (_, off) in region.items()})
        variants["sub_shifted"] = raw_variant(subs(SHIFT))
        variants["separate_page"] = raw_variant({k: mem(page_size[pid]) for k, (pid, _) in region.items()})
    return variants


def measure(
    variants: dict[str, Callable[[int], None]], rounds: int, reps: int, min_ms: float
) -> dict[str, Any]:
    """Paired rounds: every variant once per round, the order rotated; ratios to ``separate``.

    A sample is at least ``reps`` iterations and at least ``min_ms`` (so that a fast device's samples
    are not all launch and synchronisation).
    """
    t0 = time.perf_counter()
    variants["separate"](1)
    once = (time.perf_counter() - t0) * 1e3
    reps = max(reps, int(min_ms / max(once, 1e-3)) + 1)
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            t0 = time.perf_counter()
            variants[k](reps)
            times[k].append((time.perf_counter() - t0) / reps * 1e3)
    out: dict[str, Any] = {"variants": {}, "binding_ratios": {}}
    for k in names:
        tq = _quartiles(times[k])
        out["variants"][k] = {
            "ms_median": round(statistics.median(times[k]), 3),
            "ms_min": round(min(times[k]), 3),
            "ms_iqr": [round(tq[0], 3), round(tq[2], 3)],
            **_ratio(times[k], times["separate"]),
            "reps": reps,
        }
    # The pairs that differ in the binding alone (same launch path): what the figure asks.
    for a, b in BINDING_PAIRS:
        if a in times and b in times:
            out["binding_ratios"][f"{a}/{b}"] = _ratio(times[a], times[b])
    return out


#: (variant, reference): a pooled binding against one without a sub-buffer, on one launch path;
#: the control's pair shows the noise of the run.
BINDING_PAIRS = (("sub", "separate"), ("pooled", "own_pages"), ("separate_again", "separate"))


def _quartiles(values: list[float]) -> list[float]:
    return statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3


def _ratio(times: list[float], reference: list[float]) -> dict[str, Any]:
    """The median and interquartile range of the per-round ratios ``times / reference``."""
    ratios = [t / r for t, r in zip(times, reference, strict=True)]
    q = _quartiles(ratios)
    return {"ratio": round(statistics.median(ratios), 3), "ratio_iqr": [round(q[0], 3), round(q[2], 3)]}


def host_facts() -> dict[str, Any]:
    """What of the host may matter to a CPU device: cores, transparent huge pages, driver settings."""
    facts: dict[str, Any] = {"cpus": os.cpu_count(), "machine": platform.machine()}
    # Driver settings that change the figures (POCL_CPU_MAX_CU_COUNT: PoCL's worker threads).
    facts["env"] = {k: v for k, v in os.environ.items() if k.startswith(("POCL_", "CUBEPLUG_"))}
    try:
        facts["thp"] = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        pass
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("selector", nargs="?", default=os.environ.get("CUBEPLUG_TEST_OPENCL", "opencl:0"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=3, help="iterations per sample, at least")
    ap.add_argument("--min-ms", type=float, default=20.0, help="milliseconds per sample, at least")
    ap.add_argument("--gemm-n", type=int, default=256)
    ap.add_argument("--atax-n", type=int, default=2048)
    ap.add_argument("--diagnose", action="store_true", help="add page_offset, sub_shifted, separate_page")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    client = cubeplug.client(args.selector)
    dev = client.server.storage.ctx.device
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {
        "probe": "bench/probes/subbuffer_penalty.py",
        "argv": sys.argv[1:],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(dev.name).strip(),
        "platform": str(dev.platform.name).strip(),
        "driver": str(dev.driver_version).strip(),
        "host": host_facts(),
        "rounds": args.rounds,
        "cases": {},
    }
    print(f"{result['device']} [{result['platform']} {result['driver']}] {result['host']}")
    for case in (gemm_case(args.gemm_n, rng), atax_case(args.atax_n, rng)):
        figures = measure(prepare(client, case, args.diagnose), args.rounds, args.reps, args.min_ms)
        result["cases"][f"{case.name}_{case.n}"] = figures
        for k, f in figures["variants"].items():
            print(
                f"{case.name:5s} n={case.n:<5d} {k:14s} {f['ms_median']:9.3f} ms (min {f['ms_min']:.3f})"
                f"  x{f['ratio']:.3f} of separate, IQR {f['ratio_iqr']}"
            )
        for pair, f in figures["binding_ratios"].items():
            print(f"{case.name:5s} n={case.n:<5d} {pair:24s} x{f['ratio']:.3f}, IQR {f['ratio_iqr']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
