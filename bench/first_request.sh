#!/usr/bin/env bash
# The first requests after a server starts, with and without --warm-up, the starts taking turns
# (off, on, off, on, ...) so that slow spells of a shared machine hit both. Each start serves three
# requests one after the other (one stream, the same document) and prints one line: the setting, how
# long the server took from launch to "listening on", and each request's latency and time to first token.
#   bench/first_request.sh MODEL_DIR [DOC]   env: ROUNDS (3), NEW_TOKENS (32), THREADS (2), BUILD (build; absolute or in the repository),
#                                                 SERVER_ARGS (more server flags, e.g. "--device cuda")
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 1 ] || { echo "usage: $0 MODEL_DIR [DOC]" >&2; exit 2; }
model=$1 doc=${2:-$root/docs/example-document.txt}
build=${BUILD:-build}
[[ $build = /* ]] || build=$root/$build  # relative to the repository, or absolute (it was always appended)
server=$build/bin/srformer-server
out=$(mktemp)
remove_on_exit "$out"
for round in $(seq "${ROUNDS:-3}"); do
  for warm in false true; do
    log=$(mktemp)
    remove_on_exit "$log"
    start=$(date +%s%N)
    "$server" --model first="$model" --listen 127.0.0.1:0 --metrics-listen "" --threads "${THREADS:-2}" \
      --warm-up "$warm" ${SERVER_ARGS:-} 2>"$log" &
    pid=$!
    stop_on_exit $pid
    target=$(wait_for_server "$log" $pid)
    ready_ms=$((($(date +%s%N) - start) / 1000000))
    line="round $round warm-up $warm: ready ${ready_ms} ms"
    for n in 1 2 3; do
      run_client "$client" --target "$target" --load --json --concurrency 1 --requests 1 --truncate \
        --max-new-tokens "${NEW_TOKENS:-32}" --min-new-tokens "${NEW_TOKENS:-32}" "$doc" >"$out"
      line+=$(python3 -c 'import json, sys; j = json.load(sys.stdin)
print(" | request %s: %.0f ms (ttft %.0f)" % (sys.argv[1], j["latency_ms"]["p50"], j["ttft_ms"]["p50"]), end="")' $n <"$out")
    done
    echo "$line"
    stop_server $pid || true
  done
done
