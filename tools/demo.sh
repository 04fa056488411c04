#!/usr/bin/env bash
# The README's main command: installs, builds, starts the server on the default model, sends a
# document with the client and prints the streamed summary.
#   bash tools/demo.sh [DOCUMENT]     (as root on Debian bookworm; DOCUMENT from any directory, - for stdin)
# Env: MODEL_DIR (default: models/debian-synopsis-t5, the small model trained by our own tools that ships
# in the repo; see its README.md; a relative path is from the current directory), PORT (50051),
# METRICS_PORT (9464).
set -euo pipefail

# DOCUMENT and MODEL_DIR name paths from the caller's directory: resolved before the cd below (the defaults
# are the repository's own). "-" is standard input, as for srformer-client.
doc=docs/example-package-description.txt
if [ $# -gt 0 ]; then
  if [ "$1" = - ]; then doc=-; else doc=$(realpath -m -- "$1"); fi
fi
model=models/debian-synopsis-t5
if [ -n "${MODEL_DIR:-}" ]; then model=$(realpath -m -- "$MODEL_DIR"); fi
cd "$(dirname "$0")/.."
# Checked before the set-up and the build, which take minutes.
[ "$doc" = - ] || [ -f "$doc" ] || { echo "demo: no document '$doc' (DOCUMENT: a text file)" >&2; exit 1; }
[ -f "$model/config.json" ] || { echo "demo: no model in '$model' (MODEL_DIR: a Hugging Face BART/T5 directory)" >&2; exit 1; }

bash deploy/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target srformer srformer-server srformer-client

port=${PORT:-50051}
metrics_port=${METRICS_PORT:-9464}

log=$(mktemp)
build/bin/srformer-server --model "default=$model" --listen "127.0.0.1:$port" \
  --metrics-listen "127.0.0.1:$metrics_port" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 120); do
  grep -q "listening on" "$log" && break
  if ! kill -0 "$server" 2>/dev/null; then
    cat "$log" >&2
    # The server's words name its flags (--listen, --metrics-listen), which the demo sets from these.
    if grep -q "Address already in use" "$log"; then
      echo "demo: the server exited: port $port or $metrics_port is taken; PORT=N and METRICS_PORT=N move them" >&2
    else
      echo "demo: the server exited" >&2
    fi
    exit 1
  fi
  sleep 0.5
done
grep -q "listening on" "$log" || { cat "$log" >&2; echo "demo: the server did not come up" >&2; exit 1; }

echo "== document: $doc"
echo "== streamed summary (model: $model; see docs/DEMO.md for what it is):"
build/bin/srformer-client --target "127.0.0.1:$port" --model default --stream "$doc"
# Scraped here, while the server still runs: it is stopped when the demo exits, so a curl hint printed for
# later would reach nothing.
echo "== metrics (http://127.0.0.1:$metrics_port/metrics; this server stops when the demo exits):"
if command -v curl >/dev/null; then
  curl -s "http://127.0.0.1:$metrics_port/metrics" | grep -E '^srformer_(requests_total|generated_tokens_total)' || true
else
  echo "(no curl here: start srformer-server with --metrics-listen and read /metrics while it runs)"
fi
