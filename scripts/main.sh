#!/usr/bin/env bash
# Installs everything (scripts/setup.sh) and runs the main job on the auto-selected backend:
# `cubeplug doctor` (what is installed and usable, every config value with its origin), then
# `cubeplug bench --quick` (launch, allocation, bandwidth, autotuned reduce_sum and matmul, each
# against the raw library in the same run), writing bench-quick.json and bench-quick.png.
# Arguments go to `cubeplug bench`, e.g. `bash scripts/main.sh --backend opencl` or `--all`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
.venv/bin/cubeplug doctor
.venv/bin/cubeplug bench --quick --json bench-quick.json --plot bench-quick.png "$@"
