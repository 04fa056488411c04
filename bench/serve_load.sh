#!/usr/bin/env bash
# Serving load sweep: starts srformer-server on a model directory and runs srformer-client --load at
# several concurrencies, printing one JSON line per level (tokens/s, requests/s, TTFT and
# inter-token p50/p90/p99).
#   bench/serve_load.sh BUILD_DIR MODEL_DIR "1 4 16" DOC...   (env: REQUESTS=64 MAX_NEW=64 THREADS=2 EXTRA="...")
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
build=$1 model=$2 levels=$3
shift 3
[ $# -gt 0 ] || { echo "usage: $0 BUILD_DIR MODEL_DIR \"1 4 16\" DOC..." >&2; exit 2; }
log=$(mktemp)
remove_on_exit "$log"
"$build/bin/srformer-server" --model bench="$model" --listen 127.0.0.1:0 --metrics-listen "" \
  --threads "${THREADS:-2}" ${EXTRA:-} 2>"$log" &
pid=$!
stop_on_exit $pid
target=$(wait_for_server "$log" $pid)
for c in $levels; do
  run_client "$build/bin/srformer-client" --target "$target" --load --json --concurrency "$c" \
    --requests "${REQUESTS:-64}" --max-new-tokens "${MAX_NEW:-64}" "$@"
done
