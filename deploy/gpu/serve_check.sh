#!/usr/bin/env bash
# A server on DEVICE serves the demo model's summary of a document as the offline tool does on the CPU
# (fp32), and on cuda also in fp16, with the GPU metrics exported. Part of deploy/gpu/check.sh; on the
# CPU it checks itself:   deploy/gpu/serve_check.sh BIN_DIR [cpu|cuda[:N]]
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: serve_check.sh BIN_DIR [DEVICE]}
device=${2:-cuda}
model=$src/models/debian-synopsis-t5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { failures=$((failures + 1)); echo "serve_check.sh: FAILED: $*"; }
cat >"$work/doc.txt" <<'DOC'
GNU Wget is a free software package for retrieving files using HTTP, HTTPS and FTP, the most
widely-used Internet protocols. It is a non-interactive commandline tool, so it may easily be called
from scripts, cron jobs, terminals without X-Windows support, etc. Wget can follow links in HTML pages
and create local versions of remote web sites, fully recreating the directory structure of the
original site. It can resume aborted downloads and respects the Robot Exclusion Standard.
DOC

# serve DTYPE: the served summary on stdout; the server's GPU metrics in $work/metrics.
serve() {
  local log="$work/server-$1.log" port mport pid
  "$bin/srformer-server" --model demo="$model" --device "$device" --dtype "$1" --listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 240); do grep -q "listening on" "$log" && break; sleep 0.5; done
  port=$(grep -o 'listening on [^ ]*' "$log" | head -n1 | sed 's/.*://')
  mport=$(grep -o 'metrics on [^ ]*' "$log" | head -n1 | sed -E 's#.*:([0-9]+)/metrics#\1#')
  if [ -n "$port" ]; then
    "$bin/srformer-client" --target "127.0.0.1:$port" --model demo --max-new-tokens 40 "$work/doc.txt"
    # python3 rather than curl: a PyTorch image has the one, not always the other.
    [ -n "$mport" ] && python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' \
      "http://127.0.0.1:$mport/metrics" | grep '^srformer_gpu' >"$work/metrics"
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" || echo "serve_check.sh: the $1 server exited with status $? after SIGTERM" >&2
  grep -iE "error|warn" "$log" | head -n 5 >&2
}

offline=$("$bin/srformer" summarize --model "$model" --max-new-tokens 40 "$work/doc.txt")
served=$(serve fp32)
echo "offline, cpu fp32: $offline"
echo "served, $device fp32: $served"
if [ -z "$served" ] || [ "$served" != "$offline" ]; then fail "the $device fp32 summary is not the offline one"; fi
if [ "$device" != cpu ]; then
  half=$(serve fp16)
  echo "served, $device fp16: $half"
  [ -n "$half" ] || fail "no fp16 summary"
  cat "$work/metrics" 2>/dev/null
  grep -q '^srformer_gpu_utilization_ratio' "$work/metrics" 2>/dev/null || fail "no GPU utilization metric"
fi
echo "serve_check.sh: $failures failure(s)"
[ "$failures" = 0 ]
