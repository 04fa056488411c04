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
