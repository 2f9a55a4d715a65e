"""``cubeplug bench``: every figure of a backend next to its raw library's, as a table, JSON and a plot.

    cubeplug bench [--backend SELECTOR ...| --all] [--quick] [--json FILE] [--plot FILE.png]
                   [--autotune-check] [--only SECTION ...] [--reduce-n N] [--matmul-size N]

Per backend: launch overhead, reserve + release, upload / download bandwidth (pageable and staged)
and device copy bandwidth per size, reduce_sum and matmul (autotuned) against the library baseline
(CuPy for CUDA, NumPy otherwise), with ratios computed from figures measured in the same run.
``--autotune-check`` adds the tuner's choice against an exhaustive measurement of every candidate
and a second process that must reuse the persisted choice. ``--quick`` uses small sizes and the
``minimal`` autotune level (unless ``[autotune] level`` is configured). The exit status is 1 when
any figure failed (a backend that did not open, a raw library that did not load, a section that
raised); the JSON says the same in ``ok`` and lists them in ``failures``.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from cubeplug.bench.report import failures, plot, rows, write_json
from cubeplug.commands.output import Output

SECTIONS = ("launch", "alloc", "bandwidth", "reduce_sum", "matmul", "std_ops", "autotune")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` subcommand's arguments."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--backend", action="append", metavar="SELECTOR",
        help="a backend selector (cuda, opencl, opencl:nvidia:0, webgpu, cpu); repeatable; default: auto",
    )  # fmt: skip
    which.add_argument("--all", action="store_true", help="every backend usable here")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, minimal autotuning (about a minute)"
    )
    parser.add_argument("--json", metavar="FILE", help="write every figure, the device and versions as JSON")
    parser.add_argument(
        "--plot", metavar="FILE.png", help="plot bandwidth against size per backend (matplotlib)"
    )
    parser.add_argument(
        "--autotune-check", action="store_true",
        help="compare the tuner's choice with every candidate measured exhaustively, and check that a "
        "second process reuses the persisted choice",
    )  # fmt: skip
    parser.add_argument("--only", action="append", choices=SECTIONS, metavar="SECTION",
                        help=f"measure only these sections ({', '.join(SECTIONS)}); repeatable")  # fmt: skip
    parser.add_argument("--reduce-n", type=int, metavar="N", help="elements of the reduce_sum figure")
    parser.add_argument("--matmul-size", type=int, metavar="N", help="m = n = k of the matmul figures")
    parser.add_argument(
        "--ops", metavar="OP,OP",
        help="the std ops of the std_ops section, comma-separated (fill, copy, axpy, reduce_sum, reduce, "
        "argmax, reduce_axis, scan, transpose, map, matmul; default: all); without --only, only that section",
    )  # fmt: skip
    parser.add_argument(
        "--ops-n", type=int, metavar="N",
        help="elements of the std_ops vector rows (matrix rows: isqrt(N) x isqrt(N))",
    )  # fmt: skip


class _Steps:
    """Progress over the bench's steps: a rich bar on a terminal, one line per step otherwise."""

    def __init__(self, bar: Any, task: Any) -> None:
        self.bar, self.task = bar, task
        self.start = time.perf_counter()

    def step(self, text: str) -> None:
        if self.bar is None:
            print(f"[bench {time.perf_counter() - self.start:7.1f}s] {text}", file=sys.stderr, flush=True)
        else:
            self.bar.update(self.task, description=text)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)


@contextmanager
def _progress(total: int) -> Iterator[_Steps]:
    from cubeplug.core.tune.progress import is_terminal

    if not is_terminal():
        yield _Steps(None, None)
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        yield _Steps(None, None)
        return
    columns = (TextColumn("{task.description:<48}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        yield _Steps(bar, bar.add_task("bench", total=total))


def _overrides(quick: bool) -> dict[str, Any]:
    """Client config for the bench: no nested progress bars; the minimal level under --quick."""
    from cubeplug.registry.settings import effective_config

    autotune: dict[str, Any] = {"bench": {"progress": False}}
    if quick and effective_config().origin("autotune.level").kind == "default":
        autotune["level"] = "minimal"
    return {"autotune": autotune}


def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def bench_backend(
    selector: str | None, args: argparse.Namespace, steps: _Steps, device_pass: bool = False
) -> dict[str, Any]:
    """Every figure of one backend (a section that fails is recorded as its error); ``device_pass``:
    a CUDA yardstick is in the run (see :func:`cubeplug.bench.std_ops.measure`)."""
    from cubeplug.bench.autotune_check import check
    from cubeplug.bench.baselines import arrays_for, raw_for
    from cubeplug.bench.clients import describe, is_gpu, make_client
    from cubeplug.bench.std_cases import OPS
    from cubeplug.bench.std_ops import bench_ops, parse_ops, sizes
    from cubeplug.bench.suite import BackendBench, plan_for

    start = time.perf_counter()
    label = selector or "auto"
    steps.step(f"{label}: opening the device")
    client = make_client(selector, **_overrides(args.quick))
    name = selector or f"{client.backend}:{client.device.index}"
    out: dict[str, Any] = {"selector": name, "device": describe(client)}
    raw = None
    try:
        raw = raw_for(client)
    except Exception as exc:
        out["raw_error"] = f"{type(exc).__name__}: {exc}"
    out["library"] = raw.library if raw is not None else "-"
    plan = plan_for(client, args.quick, args.reduce_n, args.matmul_size)
    out["plan"] = asdict(plan)
    bench = BackendBench(client, raw, plan)
    out["timing"] = bench.timing
    only = set(args.only or (("std_ops",) if args.ops else SECTIONS))
    try:
        for section, fn in (("launch", bench.launch), ("alloc", bench.alloc)):
            if section in only:
                steps.step(f"{label}: {section}")
                out[section] = _guarded(fn)
            steps.done()
        out["bandwidth"] = []
        for size in plan.sizes:
            if "bandwidth" in only:
                steps.step(f"{label}: bandwidth {size >> 10} KiB")
                out["bandwidth"].append(_guarded(lambda s=size: bench.transfers(s)))  # type: ignore[misc]
            steps.done()
        client.memory_cleanup()
        for section, fn in (("reduce_sum", bench.reduce), ("matmul", bench.matmul)):
            if section in only:
                steps.step(f"{label}: {section} (autotuned)")
                out[section] = _guarded(fn)
                client.memory_cleanup()
            steps.done()
        if "std_ops" in only:
            ops = parse_ops(args.ops) if args.ops else OPS
            try:
                arrays = arrays_for(client, raw)
            except Exception as exc:  # reported as the raw library's failure: no ratio can be computed
                arrays = None
                out.setdefault("raw_error", f"array library: {type(exc).__name__}: {exc}")
            n, side = sizes(is_gpu(client), args.quick, int(client.capabilities.max_alloc_bytes), args.ops_n)
            step = lambda op: steps.step(f"{label}: std {op}")  # noqa: E731
            missing = f"the raw library did not load ({out['raw_error']})" if "raw_error" in out else None
            # A CPU device's name never matches a CUDA GPU's: no yardstick would read its device pass.
            timed_twice = device_pass and is_gpu(client)
            measure_ops = lambda: bench_ops(bench, arrays, ops, n, side, step, missing, timed_twice)  # noqa: E731
            out["std_ops"] = _guarded(measure_ops)
        steps.done()
        if args.autotune_check and "autotune" in only:
            out["autotune_check"] = []
            for op, size in (("reduce_sum", plan.reduce_n), ("matmul", plan.matmul_n)):
                steps.step(f"{label}: autotune check {op}")
                out["autotune_check"].append(_guarded(lambda o=op, s=size: check(client, name, o, s)))  # type: ignore[misc]
                client.memory_cleanup()
        steps.done()
    finally:
        if raw is not None:
            _guarded(raw.close)
    out["seconds"] = round(time.perf_counter() - start, 2)
    return out


def print_tables(doc: Mapping[str, Any], plain: bool = False) -> None:
    """One table per backend on stdout (rich when importable)."""
    output = Output(plain)
    for name, result in doc["backends"].items():
        if "error" in result and "device" not in result:
            output.section(f"{name}: failed", result["error"])
            continue
        device = result.get("device", {})
        timing = result.get("timing", {})
        title = f"{name}: {device.get('name', '?')} ({result.get('library', '-')}; timing {timing})"
        output.table(title, ["figure", "cubeplug", "raw / baseline", "ratio"], rows(result))


def run(args: argparse.Namespace) -> int:
    """Run ``cubeplug bench``."""
    from cubeplug.bench.clients import usable_backends, versions
    from cubeplug.bench.std_ops import attach_yardsticks, cuda_in_run, parse_ops

    if args.ops:
        try:
            parse_ops(args.ops)
        except ValueError as exc:
            print(f"cubeplug bench: --ops: {exc}", file=sys.stderr)
            return 2
    selectors: list[str | None] = list(usable_backends()) if args.all else list(args.backend or [None])
    if not selectors:
        print("cubeplug bench: no usable backend here; see `cubeplug doctor`", file=sys.stderr)
        return 1
    doc: dict[str, Any] = {
        "cubeplug_bench": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "cubeplug " + " ".join(sys.argv[1:])
        if sys.argv and "cubeplug" in sys.argv[0]
        else "cubeplug bench",
        "quick": bool(args.quick),
        "host": platform.node(),  # one run, one host: what "the same GPU" of a yardstick rests on
        "versions": versions(),
        "backends": {},
    }
    device_pass = cuda_in_run(selectors)  # a device-timed pass of the std rows only for a yardstick
    per_backend = 5 + 8  # launch, alloc, reduce, matmul, std_ops + autotune; bandwidth sizes below
    with _progress(per_backend * len(selectors)) as steps:
        for selector in selectors:
            key = selector or "auto"
            try:
                result = bench_backend(selector, args, steps, device_pass)
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            doc["backends"][result.get("selector", key)] = result
            if args.json:  # after every backend, so that an interrupted run keeps what it measured
                write_json(args.json, doc)
    attach_yardsticks(doc["backends"])  # after every backend: the CUDA figure may come last
    failed = failures(doc)
    doc["ok"], doc["failures"] = not failed, failed
    print_tables(doc, bool(getattr(args, "plain", False)))
    if args.json:
        write_json(args.json, doc)
        print(f"JSON written to {args.json}")
    if args.plot:
        print(plot(args.plot, doc))
    if failed:  # scripts and CI must notice a bench whose figures are missing
        print(f"cubeplug bench: {len(failed)} figure(s) failed:", file=sys.stderr)
        for line in failed:
            print(f"  {line[:300]}", file=sys.stderr)
        return 1
    return 0
