#!/usr/bin/env bash
# What one session runs on the GPU machine (../shared/device/README.md), from the project's root:
#
#   CUBEPLUG_PURE_WHEEL=1 bash ../shared/device/prepare.sh   # here, once: fills .gl/ and .whl/
#   (a pure cubeplug wheel: one with this machine's compiled launcher does not install on 3.12)
#   device run, carry [".gl", ".whl", SO]:  bash bench/gpu_session.sh bench   # figures -> $OUT/*.json
#   device run, carry [".gl", ".whl", SO]:  bash bench/gpu_session.sh tests   # logs    -> $OUT/*.log
#
# The working tree's code is used (PYTHONPATH), not the wheel, so the figures are those of this commit.
# SO is the compiled OpenCL launcher for the machine's Python (3.12 there), built here with
#   gcc -O2 -shared -fPIC -I<python3.12 include> cubeplug/backends/opencl/_fastlaunch.c \
#       -o cubeplug/backends/opencl/_fastlaunch.cpython-312-x86_64-linux-gnu.so
# (or there, below, when the machine has a compiler and the headers).
set -u
if ls .whl/cubeplug-*-cp3*.whl >/dev/null 2>&1; then
    echo "the cubeplug wheel in .whl/ is for another Python: run CUBEPLUG_PURE_WHEEL=1 bash ../shared/device/prepare.sh" >&2
    exit 2
fi
source .gl/remote-setup.sh >/dev/null
export PYTHONPATH=$PWD:${PYTHONPATH:-}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u +%FT%TZ | tee -a "$OUT/device.txt"
suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -f "cubeplug/backends/opencl/_fastlaunch$suffix" ] || python3 setup.py -q build_ext --inplace >/dev/null 2>&1
python3 -c 'from cubeplug.backends.opencl import launch_path; print("compiled OpenCL launcher:", launch_path.status())' \
    | tee -a "$OUT/device.txt"
export CUBEPLUG_REQUIRE_NATIVE_LAUNCH=1

case "${1:-bench}" in
bench)
    timeout 200 python3 bench/bench_cuda.py --json "$OUT/cuda-h100.json" 2>&1 | tail -40
    timeout 120 python3 bench/bench_opencl.py --device opencl:nvidia:0 --json "$OUT/opencl-nvidia-h100.json" 2>&1 | tail -12
    timeout 300 python3 bench/bench_opencl.py --device opencl:portable:0 --json "$OUT/opencl-pocl-h100host.json" 2>&1 | tail -12
    timeout 120 python3 bench/bench_webgpu.py --json "$OUT/webgpu-vulkan-h100.json" 2>&1 | grep -v "^Unable\|^No \|^VK_" | tail -16
    timeout 60 python3 bench/bench_core.py --json "$OUT/core-cpu-h100host.json" 2>&1 | tail -4
    ;;
tests)
    timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda >"$OUT/cuda-tests-h100.log" 2>&1
    tail -3 "$OUT/cuda-tests-h100.log"
    CUBEPLUG_TEST_OPENCL=opencl:nvidia:0 timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/opencl \
        >"$OUT/opencl-tests-h100.log" 2>&1
    tail -3 "$OUT/opencl-tests-h100.log"
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/backends/webgpu >"$OUT/webgpu-tests-h100.log" 2>&1
    tail -3 "$OUT/webgpu-tests-h100.log"
    for b in cuda opencl:nvidia:0 webgpu; do
        timeout 60 python3 -m cubeplug conformance "$b" 2>&1 | grep -v "^Unable\|^No \|^VK_"
    done >"$OUT/conformance-h100.log"
    cat "$OUT/conformance-h100.log" | grep -E "passed|failed" 
    ;;
esac
