#!/usr/bin/env bash
# Long documents arriving in a steady load of short ones, on one server binary with each
# --max-state-memory value in turn: the largest decoder state seen (/metrics, twice a second: what the
# rows use, and what is held for them with room and holes), the process's peak resident memory, the
# admissions that went ahead of a waiting request, the short load's tokens/s and TTFT, and the long
# documents' latency.
# Shows the budget holding the state, and what holding it costs the load.
#   bench/server_state_budget.sh MODEL_DIR LONG_DOC SERVER BUDGET... [-- SHORT_DOC...]
#   env: CONCURRENCY (32), REQUESTS (192), NEW_TOKENS (64), LONG (4 long documents, one every 2 s),
#        THREADS (2), CLIENT (build/bin/srformer-client), SERVER_ARGS (more server flags, e.g.
#        "--queue-bypass-ms 0")
# BUDGET: a --max-state-memory value (0 = none, 1G, auto). Short documents default to the first 400,
# 1000 and 2000 bytes of docs/ARCHITECTURE.md.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 4 ] || { echo "usage: $0 MODEL_DIR LONG_DOC SERVER BUDGET... [-- SHORT_DOC...]" >&2; exit 2; }
model=$1 long=$2 server=$3
shift 3
budgets=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do budgets+=("$1"); shift; done
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
remove_on_exit "$tmp"
shorts=("$@")
[ ${#shorts[@]} -gt 0 ] || mapfile -t shorts < <(default_short_docs "$tmp")
for budget in "${budgets[@]}"; do
  log="$tmp/server.log"
  "$server" --model ab="$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads "${THREADS:-2}" \
    --max-batch-rows 64 --max-queue 256 --max-state-memory "$budget" ${SERVER_ARGS:-} 2>"$log" &
  pid=$!
  stop_on_exit $pid
  target=$(wait_for_server "$log" $pid)
  metrics=$(grep -o 'metrics on [^ ]*/metrics' "$log" | tail -1 | awk '{print $3}' | sed 's#/metrics$##')
  "$client" --target "$target" --model ab --load --concurrency "${CONCURRENCY:-32}" --requests "${REQUESTS:-192}" \
    --max-new-tokens "${NEW_TOKENS:-64}" --min-new-tokens "${NEW_TOKENS:-64}" --truncate "${shorts[@]}" >"$tmp/load.txt" &
  load=$!
  stop_on_exit $load
  longs=()
  for i in $(seq "${LONG:-4}"); do
    sleep 2
    ( start=$(date +%s.%N)
      "$client" --target "$target" --model ab --max-new-tokens 16 --min-new-tokens 16 --truncate --json "$long" \
        >"$tmp/long$i.json" 2>&1 || true
      awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}' >"$tmp/long$i.s" ) &
    longs+=($!)
  done
  peak=0 peak_held=0
  while kill -0 $load 2>/dev/null; do
    s=$(state_mib "$metrics")
    h=$(state_mib "$metrics" srformer_state_held_bytes)
    [ "${s:-0}" -gt "$peak" ] && peak=$s
    [ "${h:-0}" -gt "$peak_held" ] && peak_held=$h
    sleep 0.5
  done
  wait_registered $load
  for p in "${longs[@]}"; do wait "$p"; done
  hwm=$(awk '/VmHWM/ {printf "%d", $2 / 1024}' /proc/$pid/status)
  bypasses=$(metric_sum "$metrics" srformer_queue_bypasses_total)
  stop_server $pid || true
  echo "--max-state-memory $budget: $(grep -o 'decoder state budget: [^(]*' "$log" | head -1)"
  echo "    peak state ${peak} MiB used, ${peak_held} MiB held; peak RSS ${hwm} MiB; ${bypasses} admissions went ahead of a waiting request"
  echo "    long documents ($(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["input_tokens"])' "$tmp/long1.json" 2>/dev/null || echo '?') tokens) took: $(cat "$tmp"/long*.s | xargs printf '%.1f s ')"
  echo "    short load: $(grep -o 'requests: .*' "$tmp/load.txt")"
  echo "      $(grep -o 'throughput: .*' "$tmp/load.txt"); $(grep -o 'time to first token: .*' "$tmp/load.txt")"
done
