#!/usr/bin/env bash
# Set-up shared by scripts/test.sh and scripts/main.sh, on a fresh Debian/Ubuntu machine with Python 3.10+:
# system packages for the real OpenCL (PoCL) and WebGPU (Mesa lavapipe Vulkan) backends, then a
# virtual environment in .venv with cubeplug and its extras installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
APT_UPDATED=""
apt_update() {
  [ -n "$APT_UPDATED" ] && return 0
  $SUDO apt-get update -qq && APT_UPDATED=1
}
installed() {  # dpkg -s also answers for a removed package whose config files remain
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
apt_install() {
  local missing=()
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt_update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}
# lavapipe (Vulkan on the CPU) for WebGPU; the venv module for the environment.
apt_install mesa-vulkan-drivers libvulkan1 ocl-icd-libopencl1
# OpenCL on the CPU: the distribution's PoCL where the package manager has one (Debian 12: PoCL 3.1
# with LLVM 15). The pip PoCL (3.0, LLVM 14) cannot compile at all on processors its LLVM does not
# know ("unknown target CPU 'generic'"), so it is installed only where the distribution has none.
# With both present the backend offers the newer one that compiles (cubeplug doctor says which).
POCL_EXTRA=pocl
if installed pocl-opencl-icd \
  || { apt_update && [ -n "$(apt-cache policy pocl-opencl-icd 2>/dev/null | grep -v '(none)' | grep Candidate)" ]; }; then
  apt_install pocl-opencl-icd
  POCL_EXTRA=opencl
fi
$PY -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
# A C compiler and the Python headers build the OpenCL launcher in C (optional: without them the
# install goes on and launches run in Python; scripts/test.sh then fails its test that requires it).
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
$PY -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || apt_install python3-dev
[ -x .venv/bin/python ] || $PY -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[${CUBEPLUG_EXTRAS:-dev,$POCL_EXTRA,webgpu,cli,plot,docs,ray}]"
for p in plugins/*/; do
  [ -f "$p/pyproject.toml" ] && .venv/bin/python -m pip install -q -e "$p"
done
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
