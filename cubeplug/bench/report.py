"""The bench's outputs: a table per backend, the JSON document and a PNG plot of bandwidth against size."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MIB = 1 << 20


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return (
            f"{value:.{digits}g}"
            if abs(value) < 1e-3 or abs(value) >= 1e5
            else f"{value:.{digits}f}".rstrip("0").rstrip(".")
        )
    return str(value)


def _size(nbytes: int) -> str:
    if nbytes >= _MIB:
        return f"{nbytes // _MIB} MiB"
    return f"{nbytes >> 10} KiB"


@dataclass(frozen=True)
class Line:
    """One figure of a backend: cubeplug's value, the raw library's, their paired ratio and its spread."""

    label: str
    mine: Any
    theirs: Any
    ratio: Any
    spread: Mapping[str, Any] | None = None
    digits: int = 3

    def cells(self) -> list[str]:
        """The table row: label, cubeplug, raw, ``ratio [IQR]``."""
        quotient = _num(self.ratio)
        if self.spread and self.ratio is not None:
            low, high = self.spread["iqr"]
            quotient += f" [{_num(low)}-{_num(high)}]"
        return [self.label, _num(self.mine, self.digits), _num(self.theirs, self.digits), quotient]


def _line(label: str, section: Mapping[str, Any], mine: str, theirs: str, key: str, digits: int = 3) -> Line:
    return Line(label, section.get(mine), section.get(theirs), section.get(key), section.get(f"spread_{key}"),
                digits)  # fmt: skip


def lines(result: Mapping[str, Any]) -> list[Line]:
    """Every figure of one backend that was measured, in the order the table shows them."""
    out: list[Line] = []
    launch = result.get("launch")
    if isinstance(launch, Mapping) and "cubeplug_launch_us" in launch:
        out.append(_line("launch (us)", launch, "cubeplug_launch_us", "raw_launch_us",
                         "ratio_launch_us_cubeplug_over_raw"))  # fmt: skip
        out.append(_line("launch unchecked (us)", launch, "cubeplug_launch_unchecked_us", "raw_launch_us",
                         "ratio_launch_unchecked_us_cubeplug_over_raw"))  # fmt: skip
    alloc = result.get("alloc")
    if isinstance(alloc, Mapping) and "cubeplug_us" in alloc:
        out.append(_line("reserve + release 1 MiB (us)", alloc, "cubeplug_us", "raw_us",
                         "ratio_us_cubeplug_over_raw"))  # fmt: skip
    for entry in result.get("bandwidth") or []:
        if not isinstance(entry, Mapping) or "bytes" not in entry:
            continue
        for name in ("upload_pageable", "upload_staged", "download_pageable", "copy", "copy_std_kernel"):
            fig = entry.get(name)
            if not isinstance(fig, Mapping) or (
                fig.get("cubeplug_gbps") is None and fig.get("raw_gbps") is None
            ):
                continue
            label = f"{name.replace('_', ' ')} {_size(entry['bytes'])} (GB/s)"
            out.append(_line(label, fig, "cubeplug_gbps", "raw_gbps", "ratio_gbps_cubeplug_over_raw"))
    red = result.get("reduce_sum")
    if isinstance(red, Mapping) and "cubeplug_ms" in red:
        label = f"reduce_sum {red['n']} f32 (ms) [{red['chosen']}] vs {red['baseline'] or 'no baseline'}"
        out.append(_line(label, red, "cubeplug_ms", "baseline_ms", "ratio_time_cubeplug_over_baseline", 4))
        out.append(_line("reduce_sum read GB/s vs copy peak GB/s", red, "cubeplug_read_gbps",
                         "copy_peak_gbps", "ratio_read_gbps_over_copy_peak_gbps"))  # fmt: skip
    mm = result.get("matmul")
    if isinstance(mm, Mapping) and "cubeplug_tflops" in mm:
        label = f"matmul {mm['m']}^3 f32 (TFLOP/s) [{mm['chosen']}] vs {mm['baseline'] or 'no baseline'}"
        out.append(_line(label, mm, "cubeplug_tflops", "baseline_tflops",
                         "ratio_tflops_cubeplug_over_baseline", 4))  # fmt: skip
    std_ops = result.get("std_ops")
    if isinstance(std_ops, Mapping):
        out += std_lines(std_ops)
    for check in result.get("autotune_check") or []:
        if isinstance(check, Mapping) and "chosen" in check:
            reuse = "reused" if check.get("second_process_reused") else "NOT reused"
            best = check["exhaustive_best"]
            label = f"autotune {check['op']}: {check['chosen']} vs best {best}; 2nd process {reuse}"
            out.append(Line(label, None, None, check["ratio_chosen_over_exhaustive_best_median"]))
    return out


def _count(n: int) -> str:
    for shift, unit in ((30, "G"), (20, "M"), (10, "k")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _shape(row: Mapping[str, Any]) -> str:
    shape = [int(s) for s in row.get("shape") or []]
    if row.get("op") == "matmul" and len(set(shape)) == 1:
        return f"{shape[0]}^3"
    return "x".join(_count(s) for s in shape)


def std_lines(section: Mapping[str, Any]) -> list[Line]:
    """The std-op rows: our time beside the library's (paired ratio), or beside the CUDA figure of
    the same GPU (unpaired), or a note saying there is no yardstick; transpose also against the copy peak."""
    out: list[Line] = []
    for row in section.get("rows") or []:
        if not isinstance(row, Mapping):
            continue
        name = f"std {row.get('row')} {row.get('dtype', '')} {_shape(row)}".rstrip()
        if "error" in row:
            out.append(Line(f"{name}: error: {str(row['error'])[:100]}", None, None, None))
            continue
        if "skipped" in row:
            out.append(Line(f"{name}: skipped ({row['skipped']})", None, None, None))
            continue
        unit = row.get("unit", "GB/s")
        rate = row.get("cubeplug_tflops" if unit == "TFLOP/s" else "cubeplug_gbps")
        label = f"{name} (ms; {_num(rate)} {unit})"
        yardstick = row.get("yardstick")
        if row.get("raw_ms") is not None:
            out.append(_line(f"{label} vs {row.get('raw_call')}", row, "cubeplug_ms", "raw_ms",
                             "ratio_time_cubeplug_over_raw", 4))  # fmt: skip
        elif isinstance(yardstick, Mapping):
            out.append(Line(f"{label} vs {yardstick['backend']} (same GPU, unpaired)", row["cubeplug_ms"],
                            yardstick["cuda_ms"], yardstick["ratio_time_over_cuda"],
                            yardstick.get("spread_ratio_time_over_cuda"), 4))  # fmt: skip
            if yardstick.get("ratio_device_time_over_cuda") is not None:
                out.append(Line(f"{name} device time vs {yardstick['backend']} (same GPU, unpaired)",
                                row["cubeplug_device_ms"], yardstick["cuda_ms"],
                                yardstick["ratio_device_time_over_cuda"], None, 4))  # fmt: skip
        else:
            # The JSON keeps the whole note (why there is none); the table says which is missing.
            note = "no yardstick" if "yardstick_note" in row else row.get("raw_note") or "no yardstick"
            out.append(Line(f"{label}: {note}", row["cubeplug_ms"], None, None, None, 4))
        if row.get("copy_peak_gbps") is not None:
            out.append(Line(f"std {row.get('row')} GB/s vs the library's copy GB/s", row.get("cubeplug_gbps"),
                            row["copy_peak_gbps"], row.get("ratio_gbps_over_copy_peak")))  # fmt: skip
    return out


def rows(result: Mapping[str, Any]) -> list[list[str]]:
    """The table rows of one backend: figure, cubeplug, raw or baseline, ratio (cubeplug / raw) [IQR]."""
    out = [line.cells() for line in lines(result)]
    for section, value in result.items():
        if isinstance(value, Mapping) and "error" in value:
            out.append([f"{section}: error", str(value["error"])[:120], "", ""])
    return out


def failures(doc: Mapping[str, Any]) -> list[str]:
    """Every figure that failed, as ``backend: section: error``: a backend that did not open, a raw
    library that did not load (no ratio can be computed), or a section or size that raised."""
    out: list[str] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, Mapping):
            if "error" in value:
                out.append(f"{where}: {value['error']}")
                return
            for key, item in value.items():
                walk(f"{where}: {key}", item)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(f"{where}[{i}]", item)

    for name, result in doc["backends"].items():
        if "raw_error" in result:
            out.append(f"{name}: raw library: {result['raw_error']}")
        walk(name, result)
    return out


def write_json(path: str | Path, doc: Mapping[str, Any]) -> None:
    """Write the whole report as indented JSON (parent directories are created)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def plot(path: str | Path, doc: Mapping[str, Any]) -> str:
    """A PNG with one row per backend: every paired ratio with its IQR, and bandwidth against size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot written"
    backends = [(n, r) for n, r in doc["backends"].items() if lines(r)]
    if not backends:
        return "no figures to plot"
    height = max(3.0, 0.32 * max(len(lines(r)) for _, r in backends) + 1.2)
    fig, axes = plt.subplots(len(backends), 2, figsize=(15, height * len(backends)), squeeze=False)
    for (name, result), (ratio_ax, bw_ax) in zip(backends, axes):
        title = f"{name}: {result.get('device', {}).get('name', '?')}"
        _plot_ratios(ratio_ax, [line for line in lines(result) if line.ratio is not None], title)
        if not _plot_bandwidth(bw_ax, result, title):
            bw_ax.set_visible(False)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return f"plot written to {target}"


def _plot_ratios(ax: Any, shown: list[Line], title: str) -> None:
    """Horizontal bars: each figure's paired ratio (cubeplug / raw), whiskers from Q1 to Q3."""
    import matplotlib.ticker

    ys = list(range(len(shown)))[::-1]
    values = [float(line.ratio) for line in shown]
    low = [v - (line.spread["iqr"][0] if line.spread else v) for v, line in zip(values, shown)]
    high = [(line.spread["iqr"][1] if line.spread else v) - v for v, line in zip(values, shown)]
    ax.barh(ys, values, xerr=[low, high], color="C0", alpha=0.7, capsize=3)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(ys, [line.label for line in shown], fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("cubeplug / raw (time: lower is better; GB/s, TFLOP/s: higher is better); whiskers: IQR")
    ax.set_title(f"{title}: ratios", fontsize=9)
    ax.grid(True, axis="x", which="both", alpha=0.3)


def _plot_bandwidth(ax: Any, result: Mapping[str, Any], title: str) -> bool:
    """GB/s against transfer size, both sides; False when the backend has no bandwidth figures."""
    entries = [e for e in result.get("bandwidth") or [] if isinstance(e, Mapping) and "bytes" in e]
    if not entries:
        return False
    sizes = [e["bytes"] / _MIB for e in entries]
    styles = {"upload_pageable": "C0", "upload_staged": "C1", "download_pageable": "C2", "copy": "C3"}
    for series, color in styles.items():
        for side, style in (("cubeplug_gbps", "-o"), ("raw_gbps", "--x")):
            values = [(s, e[series][side]) for s, e in zip(sizes, entries)
                      if e.get(series, {}).get(side) is not None]  # fmt: skip
            if values:
                who = "cubeplug" if side.startswith("cubeplug") else "raw"
                label = f"{series.replace('_', ' ')} ({who})"
                ax.plot([v[0] for v in values], [v[1] for v in values], style, color=color, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("transfer size (MiB)")
    ax.set_ylabel("GB/s (copies: bytes read + written)")
    ax.set_title(f"{title}: bandwidth", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return True
