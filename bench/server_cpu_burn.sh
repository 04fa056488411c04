#!/usr/bin/env bash
# CPU the server burns under each OpenMP wait policy: idle before any request, idle right after one
# request, CPU per generated token under steady load (one line per concurrency), and idle right after
# that load. Read from /proc/PID/stat (utime + stime of all the server's threads, 10 ms ticks), not wall
# time, so that a shared machine's slow spells change the figures less; the policies take turns
# (one server each, ROUNDS times) so that such spells hit all of them.
#   bench/server_cpu_burn.sh MODEL_DIR SERVER [DOC...]
#   env: POLICIES (environment each server gets; "-" for none: the server's own choice; default
#        "- GOMP_SPINCOUNT=10000 GOMP_SPINCOUNT=0 SRFORMER_KEEP_OMP_POLICY=1", the last libgomp's own
#        default), LEVELS ("1 4"), REQUESTS (16), NEW_TOKENS (32), ROUNDS (2), IDLE_S (2), THREADS (2),
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
idle=${IDLE_S:-2}
ticks_per_s=$(getconf CLK_TCK)
# cpu_ticks PID: user + system ticks of all the process's threads (the fields after the name's ')').
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# idle_ms PID: CPU ms the process takes over the next IDLE_S seconds.
idle_ms() {
  local t0
  t0=$(cpu_ticks "$1")
  sleep "$idle"
  echo $((($(cpu_ticks "$1") - t0) * 1000 / ticks_per_s))
}
load() {
  run_client "$client" --target "$1" --model m --load --json --concurrency "$2" --requests "$3" \
    --max-new-tokens "${NEW_TOKENS:-32}" --min-new-tokens "${NEW_TOKENS:-32}" --truncate "${docs[@]}"
}
run() {
  local policy=$1 log=$tmp/server.log pid target t0 line env_args=()
  [ "$policy" = - ] || env_args=("$policy")
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u SRFORMER_KEEP_OMP_POLICY "${env_args[@]}" \
    "$server" --model m="$model" --listen 127.0.0.1:0 --metrics-listen "" --threads "${THREADS:-2}" \
    ${SERVER_ARGS:-} 2>"$log" &
  pid=$!
  stop_on_exit $pid
  target=$(wait_for_server "$log" $pid)
  sleep 1
  printf '%-28s %s | idle %s ms/%s s' "$policy" "$(grep -o 'wait policy: [^)]*' "$log")" "$(idle_ms $pid)" "$idle"
  load "$target" 1 1 >/dev/null
  printf ', after one request %s ms\n' "$(idle_ms $pid)"
  for c in ${LEVELS:-1 4}; do
    t0=$(cpu_ticks $pid)
    load "$target" "$c" "${REQUESTS:-16}" >"$tmp/load.json"
    line=$(cat "$tmp/load.json")
    printf '%s %s' "$((($(cpu_ticks $pid) - t0) * 1000 / ticks_per_s))" "$line" | /usr/bin/python3 -c '
import sys, json
cpu_ms, rest = sys.stdin.read().split(" ", 1)
r = json.loads(rest)
tokens = r["tokens_per_s"] * r["wall_s"]
print("    concurrency %s: %.2f CPU ms/token, %.2f cores busy, %.1f tokens/s, inter-token p50 %.1f ms"
      % (sys.argv[1], int(cpu_ms) / tokens, int(cpu_ms) / 1000 / r["wall_s"], r["tokens_per_s"],
         r["inter_token_ms"]["p50"]))' "$c"
  done
  printf '    idle after the load %s ms/%s s\n' "$(idle_ms $pid)" "$idle"
  stop_server $pid >/dev/null || true
}
for _ in $(seq "${ROUNDS:-2}"); do
  for p in ${POLICIES:-- GOMP_SPINCOUNT=10000 GOMP_SPINCOUNT=0 SRFORMER_KEEP_OMP_POLICY=1}; do run "$p"; done
done
