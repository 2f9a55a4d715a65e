#!/usr/bin/env bash
# Installs everything (scripts/setup.sh) and runs the whole test suite, then ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} PYTHONUNBUFFERED=1
# The compiled OpenCL launcher must have been built here (tests/backends/opencl/test_launch_path.py).
export CUBEPLUG_REQUIRE_NATIVE_LAUNCH=${CUBEPLUG_REQUIRE_NATIVE_LAUNCH:-1}
.venv/bin/python -m ruff check cubeplug tests bench examples plugins
.venv/bin/python -m mypy
.venv/bin/python -m pytest -q -p no:cacheprovider tests plugins/cubeplug-backend-template/tests "$@"
