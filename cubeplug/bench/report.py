"""The bench's outputs: a table per backend, the JSON document and a PNG plot of bandwidth against size."""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def _row(label: str, mine: Any, theirs: Any, quotient: Any, digits: int = 3) -> list[str]:
    return [label, _num(mine, digits), _num(theirs, digits), _num(quotient)]


def rows(result: Mapping[str, Any]) -> list[list[str]]:
    """The table rows of one backend: figure, cubeplug, raw or baseline, ratio (cubeplug / raw)."""
    out: list[list[str]] = []
    launch = result.get("launch")
    if isinstance(launch, Mapping) and "cubeplug_launch_us" in launch:
        raw = launch["raw_launch_us"]
        out.append(
            _row(
                "launch (us)", launch["cubeplug_launch_us"], raw, launch["ratio_launch_us_cubeplug_over_raw"]
            )
        )
        unchecked = launch["ratio_launch_unchecked_us_cubeplug_over_raw"]
        out.append(_row("launch unchecked (us)", launch["cubeplug_launch_unchecked_us"], raw, unchecked))
    alloc = result.get("alloc")
    if isinstance(alloc, Mapping) and "cubeplug_us" in alloc:
        quotient = alloc["ratio_us_cubeplug_over_raw"]
        out.append(_row("reserve + release 1 MiB (us)", alloc["cubeplug_us"], alloc["raw_us"], quotient))
    for entry in result.get("bandwidth") or []:
        if not isinstance(entry, Mapping) or "bytes" not in entry:
            continue
        for name in ("upload_pageable", "upload_staged", "download_pageable", "copy"):
            fig = entry.get(name)
            if not isinstance(fig, Mapping) or (
                fig.get("cubeplug_gbps") is None and fig.get("raw_gbps") is None
            ):
                continue
            label = f"{name.replace('_', ' ')} {_size(entry['bytes'])} (GB/s)"
            out.append(
                _row(label, fig["cubeplug_gbps"], fig["raw_gbps"], fig["ratio_gbps_cubeplug_over_raw"])
            )
    red = result.get("reduce_sum")
    if isinstance(red, Mapping) and "cubeplug_ms" in red:
        label = f"reduce_sum {red['n']} f32 (ms) [{red['chosen']}] vs {red['baseline'] or 'no baseline'}"
        quotient = red["ratio_time_cubeplug_over_baseline"]
        out.append(_row(label, red["cubeplug_ms"], red["baseline_ms"], quotient, 4))
        quotient = red["ratio_read_gbps_over_copy_peak_gbps"]
        label = "reduce_sum read GB/s vs copy peak GB/s"
        out.append(_row(label, red["cubeplug_read_gbps"], red["copy_peak_gbps"], quotient))
    mm = result.get("matmul")
    if isinstance(mm, Mapping) and "cubeplug_tflops" in mm:
        label = f"matmul {mm['m']}^3 f32 (TFLOP/s) [{mm['chosen']}] vs {mm['baseline'] or 'no baseline'}"
        quotient = mm["ratio_tflops_cubeplug_over_baseline"]
        out.append(_row(label, mm["cubeplug_tflops"], mm["baseline_tflops"], quotient, 4))
    for check in result.get("autotune_check") or []:
        if isinstance(check, Mapping) and "chosen" in check:
            reuse = "reused" if check.get("second_process_reused") else "NOT reused"
            best = check["exhaustive_best"]
            label = f"autotune {check['op']}: {check['chosen']} vs best {best}; 2nd process {reuse}"
            out.append(_row(label, None, None, check["ratio_chosen_over_exhaustive_best_median"]))
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
    """A PNG of bandwidth against transfer size, one panel per backend; returns what happened."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no plot written"
    panels = [(n, r) for n, r in doc["backends"].items() if r.get("bandwidth")]
    if not panels:
        return "no bandwidth figures to plot"
    cols = min(2, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(7 * cols, 4.8 * nrows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    styles = {"upload_pageable": "C0", "upload_staged": "C1", "download_pageable": "C2", "copy": "C3"}
    for ax, (name, result) in zip(axes.flat, panels):
        entries = [e for e in result["bandwidth"] if isinstance(e, Mapping) and "bytes" in e]
        sizes = [e["bytes"] / _MIB for e in entries]
        for series, color in styles.items():
            for side, style in (("cubeplug_gbps", "-o"), ("raw_gbps", "--x")):
                values = [
                    (s, e[series][side])
                    for s, e in zip(sizes, entries)
                    if e.get(series, {}).get(side) is not None
                ]
                if values:
                    label = (
                        f"{series.replace('_', ' ')} ({'cubeplug' if side.startswith('cubeplug') else 'raw'})"
                    )
                    ax.plot([v[0] for v in values], [v[1] for v in values], style, color=color, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("transfer size (MiB)")
        ax.set_ylabel("GB/s (copies: bytes read + written)")
        ax.set_title(f"{name}: {result.get('device', {}).get('name', '?')}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return f"plot written to {target}"
