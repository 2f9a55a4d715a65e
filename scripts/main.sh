#!/usr/bin/env bash
# Installs everything (scripts/setup.sh) and runs the main job on the best available backend.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
.venv/bin/python examples/demo.py "$@"
