#!/usr/bin/env bash
# The GPU checks in one call on a GPU machine, the most telling first, within a time budget:
#   deploy/gpu/check.sh [--bundle DIR] [--build DIR] [--budget SECONDS]
# 1. build with the tests (deploy/gpu/build.sh; bundle from deploy/gpu/fetch-debs.sh);
# 2. facts: the GPU, PyTorch, and which library the binaries bind libstdc++'s code to;
# 3. the tests of the GPU paths: `ctest -R Cuda` (tests/model/cuda_test.cc: the model on cuda in fp32,
#    fp16, bf16 against the CPU; the fixtures on cuda), link order, CUDA memory, CUDA autocast training;
# 4. a server on cuda:0: the demo model's summary in fp32 against the offline tool's on the CPU, fp16
#    serving, and the GPU metrics; decode speed on the GPU (srformer bench --device cuda:0);
# 5. the rest of the model, generation, server and training suites, until the budget runs out.
# With the device tool (about 15 minutes a session, of which the build takes about 4):
#   run(command="bash deploy/gpu/check.sh --bundle build-gpu-bundle --budget 480", carry=["build-gpu-bundle"])
# Everything goes to stdout and, when OUT is set (the device tool's folder), to $OUT/check.log.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
bundle=gpu-bundle
build="build-gpu"
budget=600
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "${OUT:-}" ]; then exec > >(tee "$OUT/check.log") 2>&1; fi
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
step() { echo "check.sh [$(($(date +%s) - start)) s]: $*"; }
failures=0
fail() { failures=$((failures + 1)); echo "check.sh: FAILED: $*"; }

# 1. Build.
step "build"
bash "$src/deploy/gpu/build.sh" --bundle "$bundle" --prefix /tmp/srf-deps --build "$build" ||
  { echo "check.sh: the build failed; nothing else to check" >&2; exit 1; }
bin=$build/bin

# 2. Facts.
step "facts"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available())'
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
echo "libtorch_cpu.so exports $(nm -D --defined-only "$torch_lib/libtorch_cpu.so" 2>/dev/null |
  grep -c recursive_directory_iterator) recursive_directory_iterator symbols (pytorch/pytorch#133437)"
echo "model_tests needs, in order: $(readelf -d "$bin/model_tests" | awk '/NEEDED/ {printf "%s ", $5}' | cut -c1-200)"

# 3. The GPU paths. One OpenMP thread a test: 8 tests at once share the cores.
run_ctest() {  # run_ctest NAME SECONDS ctest-args...
  local name=$1 seconds=$2
  shift 2
  if [ "$(left)" -lt 30 ]; then echo "check.sh: no time left for $name"; return; fi
  [ "$seconds" -gt "$(left)" ] && seconds=$(left)
  step "ctest $name ($* ; at most $seconds s)"
  OMP_NUM_THREADS=${OMP_THREADS:-1} timeout "$seconds" ctest --test-dir "$build" -j 8 --timeout 120 \
    --output-on-failure ${OUT:+--output-junit "$OUT/$name.xml"} "$@" | tail -n 60 ||
    fail "ctest $name"
}
run_ctest gpu-paths 240 -R 'Cuda|LinkOrder|LibstdcxxFirst|TorchCudaMemory'

# 4. A server on the GPU.
step "server on cuda:0"
bash "$src/deploy/gpu/serve_check.sh" "$bin" cuda:0 || fail "server on cuda:0"

# 4b. Decode speed on the GPU: BART-base shapes, SRformer (s = 64) and full attention, k = 1024.
step "bench on cuda:0"
for m in bart-base-srformer-s64 bart-base-full; do
  timeout 120 "$bin/srformer" bench --device cuda:0 --dtype fp32,fp16,bf16 --model "$m" --batch 1,8,32 ||
    fail "bench $m on cuda:0"
done

# 5. The rest, while time is left.
OMP_THREADS=2 run_ctest model-rest "$(left)" -L 'model|generation' -E 'Cuda|RandomChurn'
OMP_THREADS=2 run_ctest server-train "$(left)" -L 'server|train|link'

step "done: $failures failed step(s)"
[ "$failures" = 0 ]
