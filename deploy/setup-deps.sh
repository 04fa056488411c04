#!/usr/bin/env bash
# Installs every system dependency of srformer-serve from Debian bookworm's archive.
# Idempotent, quiet, fails loudly. Used by the README, CI and the Dockerfile alike.
#   deploy/setup-deps.sh           build + runtime + test dependencies
#   deploy/setup-deps.sh --runtime only what the server needs at run time (Docker runtime stage)
set -euo pipefail

mode=${1:-all}
if [ "$(id -u)" -ne 0 ]; then
  echo "setup-deps.sh: must run as root (it calls apt-get install)" >&2
  exit 1
fi

runtime_pkgs=(
  libtorch1.13 libgrpc++1.51 libprotobuf32 libsentencepiece0 libspdlog1.10
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libopenblas0-openmp libgomp1 libpcre2-8-0 libtcmalloc-minimal4 ca-certificates
)
build_pkgs=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libsentencepiece-dev sentencepiece libspdlog-dev libfmt-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev nlohmann-json3-dev libpcre2-dev
  libopenblas0-openmp libopenblas-dev libgoogle-perftools-dev
)
# Independent reference implementations and real peers used by the test suite.
test_pkgs=(
  python3 python3-sentencepiece python3-grpcio python3-protobuf python3-yaml python3-nltk wamerican prometheus openssl
)
# Node.js + npm (for the npm reference implementations); a machine may already carry a non-Debian build.
command -v npm >/dev/null 2>&1 || test_pkgs+=(nodejs npm)

case "$mode" in
  --runtime) pkgs=("${runtime_pkgs[@]}") ;;
  all|--all) pkgs=("${runtime_pkgs[@]}" "${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [--runtime]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps.sh: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  stamp=/var/lib/apt/periodic/srformer-update-stamp
  if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +720 2>/dev/null)" ]; then
    apt-get update -qq
    mkdir -p "$(dirname "$stamp")" && touch "$stamp"
  fi
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/srformer-apt.log 2>&1; then
    tail -n 40 /tmp/srformer-apt.log >&2
    echo "setup-deps.sh: apt-get install failed (full log: /tmp/srformer-apt.log)" >&2
    exit 1
  fi
fi

# LibTorch must use OpenBLAS, not the reference BLAS (~12x slower matmuls, see docs/ARCHITECTURE.md),
# and OpenBLAS built on OpenMP: it then runs on LibTorch's OpenMP threads instead of a pool of its own
# spinning against them (serving throughput at 32 streams +5-14%, docs/BENCHMARKS.md).
if [ "$mode" != "--runtime" ] || dpkg-query -W libopenblas0-openmp >/dev/null 2>&1; then
  for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
    alt=$(update-alternatives --list "${lib}-x86_64-linux-gnu" 2>/dev/null | grep openblas-openmp | head -n1 || true)
    if [ -n "$alt" ]; then update-alternatives --quiet --set "${lib}-x86_64-linux-gnu" "$alt"; fi
  done
fi
echo "setup-deps.sh: dependencies ready"
