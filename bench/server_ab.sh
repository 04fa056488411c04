#!/usr/bin/env bash
# Side-by-side A/B of two srformer-server binaries under the same steady load, the runs taking turns
# (A, B, A, B, ...) so that slow spells of a shared machine hit both. Each run starts a server, drives
# it with srformer-client --load, stops it and prints two lines: binary, tokens/s, TTFT and inter-token
# p50/p99, and the engine's overhead split from the server's shutdown log; with several distinct DOCs,
# each one's TTFT, inter-token and request latency; then the time its admissions spent encoding and joining.
#   bench/server_ab.sh SERVER_A SERVER_B MODEL_DIR [DOC...]   (several DOCs: requests take them in turn)
#   env: ROUNDS (3), CONCURRENCY (32), REQUESTS (96), NEW_TOKENS (64), THREADS (2), CLIENT (build/bin/srformer-client),
#        SERVER_ARGS (more server flags, e.g. "--dtype bf16"), CLIENT_ARGS (more request options, e.g. "--num-beams 4"),
#        ARGS_A / ARGS_B (flags for one side only: one binary under two settings, e.g.
#        ARGS_A="--encode-stall-ms 0" ARGS_B="--encode-stall-ms 200" bench/server_ab.sh build/bin/srformer-server build/bin/srformer-server MODEL)
# A binary outside the build tree needs SRFORMER_SPM_PLUGIN=/abs/path/to/libsrformer_spm.so.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 3 ] || { echo "usage: $0 SERVER_A SERVER_B MODEL_DIR [DOC...]" >&2; exit 2; }
a=$1 b=$2 model=$3
docs=("${@:4}")
[ ${#docs[@]} -gt 0 ] || docs=("$root/docs/example-document.txt")
out=$(mktemp)
remove_on_exit "$out"
run() {
  local server=$1 side_args=$2 log pid target line
  log=$(mktemp)
  remove_on_exit "$log"
  "$server" --model ab="$model" --listen 127.0.0.1:0 --metrics-listen "" --threads "${THREADS:-2}" \
    --max-batch-rows 64 --max-queue 256 ${SERVER_ARGS:-} $side_args 2>"$log" &
  pid=$!
  stop_on_exit $pid  # a failing client must not leave the server running
  target=$(wait_for_server "$log" $pid)
  run_client "$client" --target "$target" --model ab --load --json --concurrency "${CONCURRENCY:-32}" \
    --requests "${REQUESTS:-96}" --max-new-tokens "${NEW_TOKENS:-64}" --min-new-tokens "${NEW_TOKENS:-64}" \
    ${CLIENT_ARGS:-} --truncate "${docs[@]}" >"$out"
  line=$(cat "$out")
  stop_server $pid || true
  printf '%s tokens/s %s | %s\n' "$server${side_args:+ $side_args}" \
    "$(printf '%s' "$line" | /usr/bin/python3 -c 'import json,sys; r = json.load(sys.stdin)
f = lambda p: "%s/%s ms" % tuple(round(p[k]) if p[k] is not None else "-" for k in ("p50", "p99"))
print(round(r["tokens_per_s"], 1), "| TTFT p50/p99", f(r["ttft_ms"]), "| inter-token p50/p99", f(r["inter_token_ms"]))')" \
    "$(grep -o 'engine overhead.*' "$log" | tail -1)"
  printf '%s' "$line" | /usr/bin/python3 -c 'import json,sys; r = json.load(sys.stdin)
f = lambda p: "%s/%s ms" % tuple(round(p[k]) if p[k] is not None else "-" for k in ("p50", "p99"))
for d in r.get("by_document", []):
    print("    document %d (%d bytes, %d requests): TTFT p50/p99 %s | inter-token p50/p99 %s | latency p50/p99 %s"
          % (d["document"], d["bytes"], d["requests_ok"], f(d["ttft_ms"]), f(d["inter_token_ms"]), f(d["latency_ms"])))'
  grep -o '[0-9]* encoder calls, .*' "$log" | tail -1 | sed 's/^/    /'
  rm -f "$log"
}
for _ in $(seq "${ROUNDS:-3}"); do
  run "$a" "${ARGS_A:-}"
  run "$b" "${ARGS_B:-}"
done
