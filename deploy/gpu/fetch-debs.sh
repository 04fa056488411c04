#!/usr/bin/env bash
# Downloads (no install) the Debian bookworm packages srformer-serve needs besides LibTorch, with their
# library dependencies, into one bundle directory that deploy/gpu/build.sh unpacks on a GPU machine
# (a PyTorch CUDA image with no network). Run on a Debian bookworm machine with apt access:
#   deploy/gpu/fetch-debs.sh [BUNDLE_DIR]      (default: ./gpu-bundle)
# Packages every glibc/GCC image already carries (libc, libstdc++, zlib runtime, ...) are left out;
# the bundle must stay under 64 MiB (the device machine's transfer limit) and the script fails above it.
set -euo pipefail

bundle=${1:-gpu-bundle}
limit_mib=64

# What we build against (headers, CMake configs, protoc + grpc plugin) and link with. No LibTorch: the
# GPU build uses PyTorch's own (CUDA) LibTorch.
wanted=(
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libsentencepiece-dev libspdlog-dev libfmt-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev libpcre2-dev
  libabsl-dev libre2-dev libc-ares-dev zlib1g-dev libssl-dev libtcmalloc-minimal4
)
# Present on any image with a C++ toolchain (or irrelevant to a build): never bundled.
skip_regex='^(libc6|libc6-dev|libc-dev-bin|libgcc-s1|libgcc-.*-dev|libstdc\+\+6|libstdc\+\+-.*-dev|gcc-.*|g\+\+-.*|cpp-.*|'\
'linux-libc-dev|libcrypt1|libcrypt-dev|libnsl.*|libtirpc.*|rpcsvc-proto|zlib1g|debconf|dpkg|perl.*|libperl.*|'\
'tar|install-info|sensible-utils|tzdata|libselinux1|libzstd1|liblzma5|libbz2-1.0|libgmp10|libmpfr6|libmpc3|'\
'libisl23|libasan.*|liblsan.*|libtsan.*|libubsan.*|libitm1|libatomic1|libquadmath0|libgomp1|libhwasan.*|binutils.*|'\
'libbinutils|libctf.*|libgprofng.*|libjansson4|libsframe.*|libcc1-0|libssl3|libpcre2-8-0|python3.*|libpython.*|'\
'libexpat1|libffi8|libsqlite3-0|libuuid1|libncursesw6|libtinfo6|libreadline8|readline-common|libdb5.3|'\
'media-types|mailcap|libmd0|libbsd0|libsystemd0|libcap2|libgcrypt20|libgpg-error0|liblz4-1|libudev1)$'

if ! command -v apt-get >/dev/null || ! grep -q bookworm /etc/os-release; then
  echo "fetch-debs.sh: run this on Debian bookworm (the bundle must match the headers we test with)" >&2
  exit 1
fi

# Dependency closure (Depends and PreDepends only; no Recommends/Suggests), real packages only.
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${wanted[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
pkgs=()
for p in "${closure[@]}"; do
  [[ "$p" =~ $skip_regex ]] && continue
  # Only the amd64 / all flavour: a ':i386' name in the closure is a multiarch artefact.
  [[ "$p" == *:* ]] && continue
  pkgs+=("$p")
done

mkdir -p "$bundle"
rm -f "$bundle"/*.deb
(cd "$bundle" && apt-get download -qq "${pkgs[@]}")
printf '%s\n' "${pkgs[@]}" >"$bundle/PACKAGES"

size_kib=$(du -sk "$bundle" | cut -f1)
echo "fetch-debs.sh: ${#pkgs[@]} packages, $((size_kib / 1024)) MiB in $bundle"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  echo "fetch-debs.sh: bundle exceeds ${limit_mib} MiB; trim wanted/skip lists" >&2
  exit 1
fi
