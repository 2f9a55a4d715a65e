#!/usr/bin/env bash
# Installs everything (scripts/setup.sh) and runs the whole test suite, then ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} PYTHONUNBUFFERED=1
# The compiled OpenCL launcher must have been built here (tests/backends/opencl/test_launch_path.py).
export CUBEPLUG_REQUIRE_NATIVE_LAUNCH=${CUBEPLUG_REQUIRE_NATIVE_LAUNCH:-1}
# Which OpenCL devices the tests run on (opencl:0 first) and which were left out, and why.
.venv/bin/python -c 'from cubeplug.backends.opencl.plugin import cubeplug_diagnostics as d
print("OpenCL devices:", *d(backend="opencl").get("opencl devices", ["none"]), sep="\n  ")' || true
.venv/bin/python -m ruff check cubeplug tests bench examples plugins
.venv/bin/python -m mypy
# The architecture's rules (layers, backends only through cubeplug.plugin): [tool.importlinter] in pyproject.
.venv/bin/lint-imports --no-cache
# The documentation (docs/): built with warnings as errors, and every code example in it executed.
.venv/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
.venv/bin/sphinx-build -W --keep-going -q -b doctest docs docs/_build/doctest
.venv/bin/python -m pytest -q -p no:cacheprovider tests plugins/cubeplug-backend-template/tests "$@"
