#!/usr/bin/env bash
# Set-up shared by scripts/test.sh and scripts/main.sh, on a fresh Debian/Ubuntu machine with Python 3.10+:
# system packages for the real OpenCL (PoCL) and WebGPU (Mesa lavapipe Vulkan) backends, then a
# virtual environment in .venv with cubeplug and its extras installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
# lavapipe (Vulkan on the CPU) for WebGPU; the venv module for the environment.
apt_install mesa-vulkan-drivers libvulkan1 ocl-icd-libopencl1
$PY -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
# A C compiler and the Python headers build the OpenCL launcher in C (optional: without them the
# install goes on and launches run in Python; scripts/test.sh then fails its test that requires it).
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
$PY -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || apt_install python3-dev
[ -x .venv/bin/python ] || $PY -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[${CUBEPLUG_EXTRAS:-dev,pocl,webgpu,cli,plot}]"
for p in plugins/*/; do
  [ -f "$p/pyproject.toml" ] && .venv/bin/python -m pip install -q -e "$p"
done
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
