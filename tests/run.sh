#!/usr/bin/env bash
# The README's test command: installs dependencies, builds everything, runs the whole test suite.
#   bash tests/run.sh            (as root on Debian bookworm)
# Env: BUILD_DIR (default build), JOBS (default nproc), CTEST_ARGS (extra ctest arguments).
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/setup-deps.sh
bash tests/reference/install.sh   # independent reference implementations (npm), for parity tests

build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$jobs"
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure -j "$jobs" ${CTEST_ARGS:-}
# LibTorch's path, the one a GPU takes (and a CPU without AVX2): the model and generation suites again
# with the CPU kernels off (tests of the kernels' own path skip, saying so).
for suite in model_tests generation_tests; do
  echo "== $suite with SRFORMER_CPU_KERNELS=0"
  SRFORMER_CPU_KERNELS=0 "$build/bin/$suite" --gtest_brief=1
done
