# Before/after on the GPU machine: a baseline tree in .base/ (git archive of the commit before the work, with its own
# cp312 _fastlaunch module built beside it) and the working tree,
# alternately, same machine, same call. Writes $OUT/h100-before-after.json and $OUT/bench.log.
set -u
ROOT=$PWD
source .gl/remote-setup.sh >/dev/null
export XDG_RUNTIME_DIR=/tmp PYTHONUNBUFFERED=1
(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%FT%TZ) > $OUT/device.txt
mkdir -p /tmp/gb
one() {  # tree name args...
  tree=$1; name=$2; shift 2
  echo "== $name" >> $OUT/bench.log
  (cd $tree && PYTHONPATH=$tree:${PYTHONPATH:-} timeout 200 python3 "$@" --json /tmp/gb/$name.json 2>&1 \
     | grep -v "^Unable\|^No \|^VK_" | tail -30) >> $OUT/bench.log
}
for r in 1 2; do
  one $ROOT/.base cuda-base-$r bench/bench_cuda.py --quick
  one $ROOT cuda-new-$r bench/bench_cuda.py --quick
  one $ROOT/.base ocl-base-$r bench/bench_opencl.py --quick --device opencl:nvidia:0
  one $ROOT ocl-new-$r bench/bench_opencl.py --quick --device opencl:nvidia:0
done
one $ROOT/.base wgpu-base-1 bench/bench_webgpu.py --quick
one $ROOT wgpu-new-1 bench/bench_webgpu.py --quick
python3 - <<'PY'
import json, glob, os
out = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob("/tmp/gb/*.json"))}
out["device"] = open(os.environ["OUT"] + "/device.txt").read()
json.dump(out, open(os.environ["OUT"] + "/h100-before-after.json", "w"), indent=1)
print(sorted(out))
PY
