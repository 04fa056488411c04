#!/usr/bin/env bash
# Bursts of load against one server: starts it, runs srformer-client --load BURSTS times one after
# another (each burst starts when the last one's requests are done, so the batch empties in between),
# prints each burst's tokens/s, stops the server and prints its admission line (encoding, joining).
# Shows what a server that has already served a burst pays for the next one (warm allocator, caches).
#   bench/server_bursts.sh SERVER MODEL_DIR [DOC]
#   env: BURSTS (3), CONCURRENCY (32), REQUESTS (32, per burst), NEW_TOKENS (64), THREADS (2),
#        CLIENT (build/bin/srformer-client), SERVER_ARGS (e.g. "--dtype bf16"), CLIENT_ARGS
# A binary outside the build tree needs SRFORMER_SPM_PLUGIN=/abs/path/to/libsrformer_spm.so.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 2 ] || { echo "usage: $0 SERVER MODEL_DIR [DOC]" >&2; exit 2; }
server=$1 model=$2 doc=${3:-$root/docs/example-document.txt}
log=$(mktemp) out=$(mktemp)
remove_on_exit "$log" "$out"
"$server" --model bursts="$model" --listen 127.0.0.1:0 --metrics-listen "" --threads "${THREADS:-2}" \
  --max-batch-rows 64 --max-queue 256 ${SERVER_ARGS:-} 2>"$log" &
pid=$!
stop_on_exit $pid
target=$(wait_for_server "$log" $pid)
for i in $(seq "${BURSTS:-3}"); do
  run_client "$client" --target "$target" --model bursts --load --json --concurrency "${CONCURRENCY:-32}" \
    --requests "${REQUESTS:-32}" --max-new-tokens "${NEW_TOKENS:-64}" --min-new-tokens "${NEW_TOKENS:-64}" \
    ${CLIENT_ARGS:-} --truncate "$doc" >"$out"
  line=$(cat "$out")
  printf 'burst %s tokens/s %s\n' "$i" \
    "$(printf '%s' "$line" | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"], 1))')"
done
stop_server $pid || true
printf '%s | %s\n' "$server" "$(grep -o '[0-9]* encoder calls, .*' "$log" | tail -1)"
