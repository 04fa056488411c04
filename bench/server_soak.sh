#!/usr/bin/env bash
# Soak: one server under rounds of mixed load, to see whether its memory settles. Each round runs, at
# once, greedy streams, 4-beam requests with banned n-grams, sampled requests, requests whose deadline
# expires mid-decode (cancelled work) and a handful of bad requests; when the round is over (the batch
# empty) it prints, per round: tokens/s of the greedy streams, outcomes, the process's resident memory
# (/proc) and, from the server's /metrics, the engine's state bytes and requests in flight. At the end it prints
# the resident memory's growth from the end of round WARM to the last round (allocator pools fill in the
# first rounds; a leak keeps growing after them), stops the server (SIGTERM) and exits 1 if state bytes
# or requests in flight did not return to zero, a request other than the expiring ones failed, a bad
# request was served, or the server did not exit 0.
#   bench/server_soak.sh SERVER MODEL_DIR [DOC]
#   env: ROUNDS (12), WARM (3), NEW_TOKENS (48), THREADS (2), CLIENT (build/bin/srformer-client),
#        DEADLINE_MS (deadline of the cancelled requests, 600), SERVER_ARGS (e.g. "--dtype bf16"),
#        SERVER_LOG (keep the server's log there; e.g. for a sanitizer build's report)
# A binary outside the build tree needs SRFORMER_SPM_PLUGIN=/abs/path/to/libsrformer_spm.so.
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
[ $# -ge 2 ] || { echo "usage: $0 SERVER MODEL_DIR [DOC]" >&2; exit 2; }
server=$1 model=$2 doc=${3:-$root/docs/example-document.txt}
rounds=${ROUNDS:-12} warm=${WARM:-3} tokens=${NEW_TOKENS:-48}
work=$(mktemp -d)
# On every exit: the server stopped (bench_cleanup), then its log kept (SERVER_LOG), then the rest removed.
trap 'bench_cleanup; [ -z "${SERVER_LOG:-}" ] || cp "$work/server.log" "$SERVER_LOG"; rm -rf "$work"' EXIT
"$server" --model soak="$model" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --threads "${THREADS:-2}" \
  --max-batch-rows 64 --max-queue 256 ${SERVER_ARGS:-} 2>"$work/server.log" &
pid=$!
stop_on_exit $pid
target=$(wait_for_server "$work/server.log" $pid)
metrics=$(grep -o 'metrics on [^ ]*/metrics' "$work/server.log" | tail -1 | awk '{print $3}' | sed 's#/metrics$##')

load() {  # NAME CONCURRENCY REQUESTS [client options...]
  local name=$1 concurrency=$2 requests=$3
  shift 3
  "$client" --target "$target" --model soak --load --json --concurrency "$concurrency" --requests "$requests" \
    --max-new-tokens "$tokens" --truncate "$@" "$doc" >"$work/$name.json" || true  # exit 1: some failed
  [ -s "$work/$name.json" ] || { echo "load $name printed no report" >&2; return 1; }
}
bad_requests() {  # each must be refused; the count of refusals goes to bad.txt
  local refused=0
  printf '' >"$work/empty.txt"
  printf '  \n\t ' >"$work/blank.txt"
  for args in "--num-beams 0" "--max-new-tokens 0" "--do-sample --temperature 0" "--top-p 1.5" \
    "--repetition-penalty -1"; do
    # shellcheck disable=SC2086
    "$client" --target "$target" --model soak $args "$doc" >/dev/null 2>&1 || refused=$((refused + 1))
  done
  "$client" --target "$target" --model soak "$work/empty.txt" >/dev/null 2>&1 || refused=$((refused + 1))
  "$client" --target "$target" --model soak "$work/blank.txt" >/dev/null 2>&1 || refused=$((refused + 1))
  "$client" --target "$target" --model no-such-model "$doc" >/dev/null 2>&1 || refused=$((refused + 1))
  echo "$refused/8" >"$work/bad.txt"
}
metric() {  # NAME: the sum of the metric's samples (all label sets)
  /usr/bin/python3 - "$1" "$work/metrics.txt" <<'EOF'
import sys
name, path = sys.argv[1], sys.argv[2]
total = 0.0
for line in open(path):
    if line.startswith(name + " ") or line.startswith(name + "{"):
        total += float(line.rsplit(" ", 1)[1])
print(int(total))
EOF
}

printf '%-5s %9s %-58s %9s %11s %9s\n' round "tokens/s" "outcomes (ok/failed: greedy beam sample deadline [status codes]; bad refused)" \
  "RSS MiB" "state B" "in flight"
for r in $(seq "$rounds"); do
  load greedy 12 24 --min-new-tokens "$tokens" &
  g=$!
  load beam 2 4 --num-beams 4 --no-repeat-ngram-size 3 --length-penalty 1.2 &
  b=$!
  load sample 6 12 --do-sample --temperature 0.8 --top-p 0.9 --top-k 50 --seed "$r" --repetition-penalty 1.1 &
  s=$!
  load deadline 6 12 --min-new-tokens "$tokens" --deadline-ms "${DEADLINE_MS:-600}" &
  d=$!
  bad_requests
  for job in $g $b $s $d; do wait "$job"; done
  sleep 0.5  # the last requests' slots are freed on the decode thread after their final message
  curl -fsS "http://$metrics/metrics" >"$work/metrics.txt"
  outcomes=$(/usr/bin/python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
parts, codes, unexpected = [], {}, 0
for name in ("greedy", "beam", "sample", "deadline"):
    j = json.load(open(f"{w}/{name}.json"))
    parts.append(f"{j['requests_ok']}/{j['requests_failed']}")
    if name != "deadline":
        unexpected += j["requests_failed"]
    for err, n in j["errors"].items():  # "CODE message": the status codes, to tell cancellations from faults
        codes[err.split(" ", 1)[0]] = codes.get(err.split(" ", 1)[0], 0) + n
refused = int(open(f"{w}/bad.txt").read().split("/")[0])
print(unexpected + 8 - refused, " ".join(parts) + " [" + " ".join(f"code {c} x{n}" for c, n in sorted(codes.items())) + "]")
EOF
)
  unexpected=${outcomes%% *} outcomes=${outcomes#* }
  tps=$(/usr/bin/python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["tokens_per_s"], 1))' \
    "$work/greedy.json")
  # From /proc: the same figure as process_resident_memory_bytes (read at each scrape since session 19;
  # sampled every 5 s before, which could predate a round's peak), without depending on the server's version.
  rss=$(($(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status") / 1024))
  state=$(metric srformer_state_bytes)
  inflight=$(metric srformer_requests_in_flight)
  printf '%-5s %9s %-58s %9s %11s %9s\n' "$r" "$tps" "$outcomes; $(cat "$work/bad.txt")" "$rss" "$state" "$inflight"
  echo "$r $rss $state $inflight $unexpected" >>"$work/rounds.txt"
done
status=0
stop_server $pid || status=$?
[ $status -eq 0 ] || { echo "server exited with status $status; its log ends:" >&2; tail -40 "$work/server.log" >&2; }
/usr/bin/python3 - "$work/rounds.txt" "$warm" "$status" <<'EOF'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
warm = min(int(sys.argv[2]), len(rows))
base, last = rows[warm - 1][1], rows[-1][1]
half = rows[(len(rows) - 1) // 2]
print(f"RSS after round {warm}: {base} MiB; after round {rows[-1][0]}: {last} MiB "
      f"({last - base:+d} MiB over {len(rows) - warm} rounds, peak {max(r[1] for r in rows)} MiB); "
      f"over the second half (rounds {half[0]}-{rows[-1][0]}): {last - half[1]:+d} MiB")
left = [r for r in rows if r[2] != 0 or r[3] != 0]
if left:
    print("state bytes or requests in flight not back to 0 after rounds " + ", ".join(str(r[0]) for r in left))
wrong = [r for r in rows if r[4] != 0]
if wrong:
    print("requests that should succeed failed, or bad ones were served, in rounds " + ", ".join(str(r[0]) for r in wrong))
print(f"server exit status {sys.argv[3]}")
sys.exit(1 if left or wrong or sys.argv[3] != "0" else 0)
EOF
