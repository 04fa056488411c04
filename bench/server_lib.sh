# Sourced by the bench scripts that start srformer-server.
# Sets root (the repository) and client (CLIENT, else the build's srformer-client).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
client=${CLIENT:-$root/build/bin/srformer-client}

# wait_for_server LOG PID: waits (up to 60 s) for the server writing its log to LOG to say
# "listening on HOST:PORT", and prints HOST:PORT (0.0.0.0 as 127.0.0.1). Fails, with the log on
# stderr, when the server exits first.
wait_for_server() {
  local log=$1 pid=$2
  for _ in $(seq 600); do
    grep -q "listening on" "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.1
  done
  grep -o 'listening on [^ ]*' "$log" | awk '{print $3}' | sed 's/^0\.0\.0\.0/127.0.0.1/'
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
