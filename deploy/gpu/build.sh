#!/usr/bin/env bash
# Builds srformer-serve on a GPU machine (a PyTorch CUDA image: python3 with torch, CMake, ninja, a C++
# compiler, CUDA toolkit; no network) against PyTorch's bundled CUDA LibTorch and the Debian packages
# downloaded beforehand by deploy/gpu/fetch-debs.sh.
#   deploy/gpu/build.sh [--bundle DIR] [--prefix DIR] [--build DIR] [--install DIR] [--no-tests] [--test [ctest args]]
# Defaults: --bundle gpu-bundle --prefix /opt/srformer-deps --build build-gpu. Binaries: <build>/bin.
# The binaries carry an RPATH to the prefix and to torch's lib dir; <prefix>/env.sh sets the same for tools.
#
# NOTE: written on a machine without a GPU; first run on one in session 43 (an H200, docs/OPERATIONS.md,
# "GPU build without Docker"). Every step echoes what it does so a failure points at its cause.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
bundle=gpu-bundle
prefix=/opt/srformer-deps
build=build-gpu
install=""
tests=ON
run_tests=0
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --install) install=$2; shift 2 ;;
    --no-tests) tests=OFF; shift ;;
    --test) run_tests=1; shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
arch_lib=usr/lib/x86_64-linux-gnu

step() { echo "build.sh: $*"; }

# 1. Unpack the bundle (dpkg -x: no maintainer scripts, no dpkg database, nothing outside the prefix).
if [ ! -f "$prefix/.unpacked" ] || [ "$bundle" -nt "$prefix/.unpacked" ]; then
  shopt -s nullglob
  debs=("$bundle"/*.deb)
  if [ ${#debs[@]} -eq 0 ]; then
    echo "build.sh: no .deb files in '$bundle'; run deploy/gpu/fetch-debs.sh on a Debian bookworm machine first" >&2
    exit 1
  fi
  step "unpacking ${#debs[@]} packages into $prefix"
  for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$prefix"; done

  # Re-aims link $1 (to $2) at the host's library of the same soname.
  aim_at_host() {
    local soname dir
    soname=$(basename "$2" | sed -E 's/(\.so\.[0-9]+).*/\1/')
    for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /usr/lib64; do
      if [ -e "$dir/$soname" ]; then ln -sfn "$dir/$soname" "$1"; return; fi
    done
    case "$soname" in *.so*) echo "build.sh: warning: $1 -> $2 leads nowhere (no $soname here)" >&2 ;; esac
  }
  # Absolute symlinks (e.g. libz.so -> /lib/.../libz.so.1.2.13) point outside the prefix: re-aim them at the
  # prefix copy, else at the host's library.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; else aim_at_host "$link" "$target"; fi
  done < <(find "$prefix" -type l -lname '/*')
  # Relative links to a runtime library the bundle leaves to the image (libssl.so -> libssl.so.3,
  # libpcre2-8.so -> libpcre2-8.so.0.11.2: fetch-debs.sh skips libssl3 and libpcre2-8-0) lead nowhere in
  # the prefix: the host's library too.
  while IFS= read -r link; do aim_at_host "$link" "$(readlink "$link")"; done < <(find "$prefix" -xtype l)

  # pkg-config files say prefix=/usr (used by our PCRE2 lookup and gRPC's RE2/c-ares lookups).
  find "$prefix/$arch_lib/pkgconfig" "$prefix/usr/share/pkgconfig" -name '*.pc' 2>/dev/null |
    xargs -r sed -i -E "s#(^|[=[:space:]]|-I|-L)/usr(/|$)#\1$prefix/usr\2#g"
  touch "$prefix/.unpacked"
fi

# 2. Environment: bundled protoc/grpc_cpp_plugin and their libraries, pkg-config, torch's CMake prefix.
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
torch_version=$(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)')
step "LibTorch from PyTorch $torch_version ($torch_prefix)"
# Debian's C++ libraries (gRPC, protobuf, spdlog) use the C++11 std::string ABI; a pre-C++11-ABI LibTorch
# (PyTorch < 2.7 wheels) cannot be linked with them.
if [ "$(python3 -c 'import torch; print(int(torch.compiled_with_cxx11_abi()))')" != 1 ]; then
  echo "build.sh: this PyTorch's LibTorch uses the pre-C++11 ABI; use PyTorch >= 2.7 (or a cxx11-abi LibTorch)" >&2
  exit 1
fi
cat >"$prefix/env.sh" <<ENV
# Source this to run srformer binaries or the bundled protoc outside CMake.
export PATH="$prefix/usr/bin:\$PATH"
export LD_LIBRARY_PATH="$prefix/$arch_lib:$torch_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$prefix/$arch_lib/pkgconfig:$prefix/usr/share/pkgconfig"
ENV
# shellcheck source=/dev/null
source "$prefix/env.sh"
protoc --version >/dev/null || { echo "build.sh: bundled protoc does not run (missing library?)" >&2; exit 1; }

# 3. Configure. RPATH (not RUNPATH: --disable-new-dtags) so transitive bundled libraries resolve too, and
#    the dlmopen'ed SentencePiece shim finds libsentencepiece in its own link-map namespace.
rpath="$prefix/$arch_lib;$torch_lib"
step "configuring $build"
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DCMAKE_LIBRARY_PATH="$prefix/$arch_lib" \
  -DCMAKE_PROGRAM_PATH="$prefix/usr/bin" \
  -DProtobuf_PROTOC_EXECUTABLE="$prefix/usr/bin/protoc" \
  -DCMAKE_BUILD_RPATH="$rpath" \
  -DCMAKE_INSTALL_RPATH="$rpath" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags" \
  ${install:+-DCMAKE_INSTALL_PREFIX="$install"} \
  -DSRFORMER_BUILD_TESTS="$tests" \
  -DSRFORMER_BUILD_BENCH=OFF

# 4. Build the server, client and offline tool (+ the test suite unless --no-tests).
targets=(srformer-server srformer-client srformer srformer_spm)
if [ "$tests" = ON ]; then targets=(all); fi
step "building ${targets[*]}"
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)"
if [ -n "$install" ]; then
  step "installing into $install"
  cmake --install "$build" --strip
fi
"$build/bin/srformer-server" --help >/dev/null && step "srformer-server runs"

if [ "$run_tests" = 1 ]; then
  step "ctest ${ctest_args[*]}"
  ctest --test-dir "$build" --output-on-failure "${ctest_args[@]}"
fi
