#!/usr/bin/env bash
# Resident memory of one server before a load, at its end, and once it has been idle past
# --free-memory-after-idle-ms (default here 3000): what the allocator keeps after a load, and what the
# server gives back. Read from /proc (VmRSS), beside /metrics' decoder state (0 once idle).
#   bench/server_idle_memory.sh MODEL_DIR SERVER [DOC...]
#   env: CONCURRENCY (16), REQUESTS (64), NEW_TOKENS (64), BEAMS (4), IDLE_MS (3000), THREADS (2),
#        CLIENT (build/bin/srformer-client), SERVER_ARGS (more server flags)
# Documents default to the first 400, 1000 and 2000 bytes of docs/ARCHITECTURE.md.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 2 ] || { echo "usage: $0 MODEL_DIR SERVER [DOC...]" >&2; exit 2; }
model=$1 server=$2
shift 2
tmp=$(mktemp -d)
remove_on_exit "$tmp"
docs=("$@")
[ ${#docs[@]} -gt 0 ] || mapfile -t docs < <(default_short_docs "$tmp")
idle=${IDLE_MS:-3000}
log="$tmp/server.log"
"$server" --model m="$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads "${THREADS:-2}" \
  --free-memory-after-idle-ms "$idle" ${SERVER_ARGS:-} 2>"$log" &
pid=$!
stop_on_exit $pid
target=$(wait_for_server "$log" $pid)
metrics=$(grep -o 'metrics on [^ ]*/metrics' "$log" | tail -1 | awk '{print $3}' | sed 's#/metrics$##')
rss_mib() { echo $(($(awk '/^VmRSS/ {print $2}' "/proc/$pid/status") / 1024)); }
sleep "$(awk -v ms="$idle" 'BEGIN {print ms / 1000 + 1}')"  # past the warm-up's own release
start=$(rss_mib)
run_client "$client" --target "$target" --model m --load --concurrency "${CONCURRENCY:-16}" --requests "${REQUESTS:-64}" \
  --max-new-tokens "${NEW_TOKENS:-64}" --num-beams "${BEAMS:-4}" "${docs[@]}" >"$tmp/load.txt"
ended=$(rss_mib)
state_end=$(state_mib "$metrics")
sleep "$(awk -v ms="$idle" 'BEGIN {print ms / 1000 + 1}')"
released=$(rss_mib)
echo "resident MiB: before the load $start, at its end $ended (decoder state ${state_end} MiB), idle past ${idle} ms $released"
