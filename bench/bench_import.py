"""Import time of cubeplug and time of ``cubeplug.client("cpu")`` in fresh processes (issue 3).

    python bench/bench_import.py [--json bench/results/import-cpu.json]

Five dummy plugin distributions (real dist-info entry points) are installed into a temporary
directory on PYTHONPATH, next to cubeplug's own four backends. Each figure is the median of 15 fresh
processes (the time inside the process, so interpreter start-up is not counted).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.plugins.distributions import install  # noqa: E402

DUMMIES = ("good", "broken", "hookraise", "wrongtype", "oldapi")

IMPORT = "import time; t = time.perf_counter(); import cubeplug; print(time.perf_counter() - t)"
CLIENT = (
    "import time; t = time.perf_counter(); import cubeplug; c = cubeplug.client('cpu'); "
    "print(time.perf_counter() - t)"
)
LIST = (
    "import time, io, contextlib; t = time.perf_counter(); from cubeplug.cli import main; "
    "f = io.StringIO()\nwith contextlib.redirect_stdout(f): main(['list'])\nprint(time.perf_counter() - t)"
)


def median_ms(code: str, env: dict[str, str], runs: int = 15) -> float:
    """Median seconds (as ms) that ``code`` reports over ``runs`` fresh interpreters."""
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = install(Path(tmp), *DUMMIES)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
        figures = {
            "import_cubeplug_ms": median_ms(IMPORT, env),
            "import_and_client_cpu_ms": median_ms(CLIENT, env),
            "import_and_cli_list_ms": median_ms(LIST, env),
        }
    for key, value in figures.items():
        goal = (
            "  (goal < 150 ms: " + ("met)" if value < 150 else "MISSED)")
            if key == "import_cubeplug_ms"
            else ""
        )
        print(f"{key:<28} {value:8.1f} ms{goal}")
    if args.json:
        result = {
            "bench": "import",
            "plugins_installed": len(DUMMIES) + 4,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "figures": figures,
        }
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
