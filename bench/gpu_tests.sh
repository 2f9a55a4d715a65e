# Suites on the GPU machine; $1 = a or b. Logs to $OUT.
set -u
source .gl/remote-setup.sh >/dev/null
export PYTHONPATH=$PWD:${PYTHONPATH:-} XDG_RUNTIME_DIR=/tmp CUBEPLUG_REQUIRE_NATIVE_LAUNCH=1 PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ) > $OUT/device.txt
t() { name=$1; lim=$2; shift 2; s=$(date +%s); timeout $lim "$@" > $OUT/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - s ))s: $(grep -E '[0-9]+ (passed|failed)' $OUT/$name.log | tail -1)"; }
if [ "$1" = a ]; then
  t lang-tests-h100 200 python3 -m pytest -q -p no:cacheprovider tests/lang
  t cuda-tests-h100 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda
  t conformance-cuda-h100 150 python3 -m cubeplug conformance cuda
elif [ "$1" = c ]; then
  t lang-tests-h100 200 python3 -m pytest -q -p no:cacheprovider tests/lang
  t cuda-tests-h100 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/cuda
  t conformance-cuda-h100 150 python3 -m cubeplug conformance cuda
  CUBEPLUG_TEST_OPENCL=opencl:nvidia:0 t opencl-tests-h100 150 python3 -m pytest -q -p no:cacheprovider tests/backends/opencl
  t webgpu-tests-h100 150 python3 -m pytest -q -p no:cacheprovider tests/backends/webgpu
  t conformance-opencl-h100 120 python3 -m cubeplug conformance opencl:nvidia:0
  t conformance-webgpu-h100 120 python3 -m cubeplug conformance webgpu
else
  CUBEPLUG_TEST_OPENCL=opencl:nvidia:0 t opencl-tests-h100 150 python3 -m pytest -q -p no:cacheprovider tests/backends/opencl
  t webgpu-tests-h100 150 python3 -m pytest -q -p no:cacheprovider tests/backends/webgpu
  t conformance-opencl-h100 120 python3 -m cubeplug conformance opencl:nvidia:0
  t conformance-webgpu-h100 120 python3 -m cubeplug conformance webgpu
fi
