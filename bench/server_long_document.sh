#!/usr/bin/env bash
# One long document passing through a steady load of short ones, on each server binary in turn: prints
# the engine's state bytes (from /metrics) every second after the long document was served, the
# process's resident memory at the end and at its peak, and the short load's tokens/s. Shows whether
# the rows that join after a long input has left still pay for its length (DecoderState::trim_padding).
#   bench/server_long_document.sh MODEL_DIR LONG_DOC SERVER... [-- SHORT_DOC...]
#   env: CONCURRENCY (16), REQUESTS (240), NEW_TOKENS (64), THREADS (2), CLIENT (build/bin/srformer-client)
# Short documents of different lengths keep the streams out of step, so the batch does not empty
# between waves (which would drop the padding anyway). Default: the first 400, 1000 and 2000 bytes of
# docs/ARCHITECTURE.md.
# A binary outside the build tree needs SRFORMER_SPM_PLUGIN=/abs/path/to/libsrformer_spm.so.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 3 ] || { echo "usage: $0 MODEL_DIR LONG_DOC SERVER... [-- SHORT_DOC...]" >&2; exit 2; }
model=$1 long=$2
shift 2
servers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do servers+=("$1"); shift; done
[ $# -gt 0 ] && shift
tmp=$(mktemp -d)
remove_on_exit "$tmp"
shorts=("$@")
[ ${#shorts[@]} -gt 0 ] || mapfile -t shorts < <(default_short_docs "$tmp")
for server in "${servers[@]}"; do
  log="$tmp/server.log"
  "$server" --model ab="$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads "${THREADS:-2}" \
    --max-batch-rows 64 --max-queue 256 2>"$log" &
  pid=$!
  stop_on_exit $pid
  target=$(wait_for_server "$log" $pid)
  metrics=$(grep -o 'metrics on [^ ]*/metrics' "$log" | tail -1 | awk '{print $3}' | sed 's#/metrics$##')
  "$client" --target "$target" --model ab --load --concurrency "${CONCURRENCY:-16}" --requests "${REQUESTS:-240}" \
    --max-new-tokens "${NEW_TOKENS:-64}" --min-new-tokens "${NEW_TOKENS:-64}" --truncate "${shorts[@]}" >"$tmp/load.txt" &
  load=$!
  stop_on_exit $load
  sleep 2
  run_client "$client" --target "$target" --model ab --max-new-tokens 4 --min-new-tokens 4 --truncate --json "$long" \
    >"$tmp/long.json"
  samples=()
  while kill -0 $load 2>/dev/null; do
    samples+=("$(state_mib "$metrics")")
    sleep 1
  done
  wait_registered $load
  mem=$(awk '/VmRSS|VmHWM/ {printf "%s %d MiB ", $1, $2 / 1024}' /proc/$pid/status)
  stop_server $pid || true
  echo "$server: long document of $(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["input_tokens"])' "$tmp/long.json") tokens"
  echo "    state MiB each second after it: ${samples[*]}"
  echo "    $mem| short load: $(grep -o 'throughput: .*' "$tmp/load.txt")"
done
