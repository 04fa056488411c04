# Sourced by the bench scripts that start srformer-server.
# Sets root (the repository) and client (CLIENT, else the build's srformer-client).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
client=${CLIENT:-$root/build/bin/srformer-client}

# The servers a script registers with stop_on_exit PID and the paths it registers with remove_on_exit PATH
# are stopped (SIGTERM, then waited for) and removed whenever the script ends: done, failed (set -e: a
# client that fails), interrupted (Ctrl-C) or stopped (SIGTERM). A script that set its own EXIT trap, or
# none, left its server running and its logs behind when a client failed or it was stopped.
bench_pids=() bench_paths=()
stop_on_exit() { bench_pids+=("$@"); }
remove_on_exit() { bench_paths+=("$@"); }
# A load a script runs in the background is registered too: it ignores Ctrl-C (as a script's background
# job, SIGINT ignored on entry stays so in srformer-client) and went on after the script had ended.
# wait_registered PID: waits for a registered process (such a load) to end and returns its exit status. It is
# taken off the list, so that the exit does not signal another process given its id since.
wait_registered() {
  local pid=$1 status=0 p kept=()
  wait "$pid" || status=$?
  for p in "${bench_pids[@]}"; do [ "$p" = "$pid" ] || kept+=("$p"); done
  bench_pids=("${kept[@]}")
  return $status
}
# run_client ARGS...: runs ARGS (a client) as a registered background job and waits for it; returns its exit
# status. A script's traps wait for a command in the foreground (or in $(...)) to end: a SIGTERM to the script
# (kill, a supervisor) went unanswered until that client had finished its whole load, the server running on.
# Its output goes where the call's does: run_client "$client" ... >FILE.
run_client() {
  "$@" &
  local pid=$!
  stop_on_exit "$pid"
  wait_registered "$pid"
}
# stop_server PID: stops a registered server now (SIGTERM, then waits) and returns its exit status; taken off
# the list as above.
stop_server() {
  kill -TERM "$1" 2>/dev/null || true
  wait_registered "$1"
}
bench_cleanup() {
  local pid
  for pid in "${bench_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${bench_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "${bench_paths[@]}"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for_server LOG PID: waits (up to SERVER_START_S, 60 s) for the server writing its log to LOG to say
# "listening on HOST:PORT", and prints HOST:PORT (0.0.0.0 as 127.0.0.1). Fails, with the log on
# stderr, when the server exits first or is not listening by then (it printed no address and succeeded
# then, and the clients were sent to an empty --target).
wait_for_server() {
  local log=$1 pid=$2
  for _ in $(seq $((${SERVER_START_S:-60} * 10))); do
    if grep -q "listening on" "$log"; then
      grep -o 'listening on [^ ]*' "$log" | awk '{print $3}' | sed 's/^0\.0\.0\.0/127.0.0.1/'
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.1
  done
  { cat "$log"; echo "server (pid $pid) not listening after ${SERVER_START_S:-60} s (SERVER_START_S)"; } >&2
  return 1
}

# default_short_docs DIR: writes the first 400, 1000 and 2000 bytes of docs/ARCHITECTURE.md into DIR
# (short documents of three lengths, which keep load-generator streams out of step); prints the paths.
default_short_docs() {
  for n in 400 1000 2000; do
    head -c $n "$root/docs/ARCHITECTURE.md" >"$1/short$n.txt"
    echo "$1/short$n.txt"
  done
}

# metric_sum METRICS_URL METRIC: METRIC's samples summed over its series (models).
metric_sum() {
  curl -s -m 5 "$1/metrics" | awk -v m="$2" 'index($1, m "{") == 1 || $1 == m {s += $2} END {printf "%.0f\n", s}'
}

# state_mib METRICS_URL [METRIC]: the decoder state the server's engines use now (srformer_state_bytes),
# or METRIC (e.g. srformer_state_held_bytes: the memory kept for it), in MiB.
state_mib() { echo $(($(metric_sum "$1" "${2:-srformer_state_bytes}") / 1048576)); }
