#!/usr/bin/env bash
# Serving benchmark, side by side in one run: random-weight models in T5-small and BART-base shapes
# (written once under $CACHE), each served by srformer-server and loaded by srformer-client --load at
# 1/4/16/32/64 concurrent streams. Prints one JSON line per level, the throughput ratio of each level
# to one stream (null where LEVELS measured no 1 before it), and the engine's per-step overhead outside the model (from the server's shutdown log).
#   bench/serve_sweep.sh [BUILD_DIR]   env: LEVELS="1 4 16 32 64" REQUESTS=32 NEW_TOKENS=32 THREADS=2
#                                           SHAPES="t5-small bart-base" DOC=FILE (default: the first
#                                           1500 bytes of docs/ARCHITECTURE.md; over-long input is truncated)
#                                           KERNELS="on" ("off on": each shape served twice, without and
#                                           with our CPU kernels, SRFORMER_CPU_KERNELS=0/1)
#                                           SWITCHES="true" ("false true": served with and without
#                                           --precompute-switches, after KERNELS)
#                                           DTYPES="fp32" ("fp32 bf16": served with fp32 and with bf16
#                                           projections (AMX or AVX512-BF16), innermost)
#                                           CLIENT_ARGS="" (more request options, e.g. "--num-beams 4")
set -euo pipefail
source "$(dirname "$0")/server_lib.sh"
build=${1:-$root/build}
cache=${CACHE:-/tmp/srformer-serve-bench}
levels=${LEVELS:-1 4 16 32 64}
mkdir -p "$cache"
out=$(mktemp)
remove_on_exit "$out"
doc=${DOC:-$cache/document.txt}
[ -n "${DOC:-}" ] || head -c 1500 "$root/docs/ARCHITECTURE.md" >"$doc"
for shape in ${SHAPES:-t5-small bart-base}; do
  model=$cache/$shape
  if [ ! -f "$model/model.safetensors" ]; then
    tokenizer=()  # T5: SentencePiece trained on the docs; BART: byte-level, BART-base's 50,265 tokens
    if [ "$shape" = t5-small ]; then
      cat "$root/README.md" "$root"/docs/*.md >"$cache/corpus.txt"
      tokenizer=(--corpus "$cache/corpus.txt" --vocab 4000)
    fi
    rm -rf "$model"  # an interrupted earlier init (init-model writes only into a new or empty directory)
    "$build/bin/srformer" init-model --shape "$shape" "${tokenizer[@]}" --segment-size 64 "$model" >&2
  fi
  for setting in $(for k in ${KERNELS:-on}; do for p in ${SWITCHES:-true}; do for d in ${DTYPES:-fp32}; do
    echo "$k/$p/$d"; done; done; done); do
    IFS=/ read -r kernels switches dtype <<<"$setting"
    log=$(mktemp)
    remove_on_exit "$log"
    kernel_env=$([ "$kernels" = off ] && echo 0 || echo 1)
    SRFORMER_CPU_KERNELS=$kernel_env "$build/bin/srformer-server" --model "$shape=$model" --listen 127.0.0.1:0 \
      --metrics-listen "" --threads "${THREADS:-2}" --max-batch-rows 64 --max-queue 256 \
      --precompute-switches "$switches" --dtype "$dtype" 2>"$log" &
    pid=$!
    stop_on_exit $pid
    target=$(wait_for_server "$log" $pid)
    single=""
    for c in $levels; do
      n=$(( c > ${REQUESTS:-32} ? c : ${REQUESTS:-32} ))
      run_client "$build/bin/srformer-client" --target "$target" --model "$shape" --load --json --concurrency "$c" \
        --requests "$n" --max-new-tokens "${NEW_TOKENS:-32}" --min-new-tokens "${NEW_TOKENS:-32}" ${CLIENT_ARGS:-} --truncate "$doc" \
        >"$out"
      line=$(cat "$out")
      tps=$(printf '%s' "$line" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
      # To one stream's tokens/s, measured at a level 1 before this one; null without it (the first level's
      # tokens/s was taken for one stream's, whatever its concurrency).
      [ "$c" != 1 ] || single=$tps
      ratio=$(/usr/bin/python3 -c 'import sys; t, one = sys.argv[1:]
print(round(float(t) / float(one), 2) if one and float(one) > 0 else "null")' "$tps" "$single")
      echo "{\"model\": \"$shape\", \"cpu_kernels\": \"$kernels\", \"precompute_switches\": $switches, \"dtype\": \"$dtype\", \"vs_one_stream\": $ratio, \"load\": $line}"
    done
    stop_server $pid || true
    grep -oE "[0-9]+ decode steps, .*" "$log" | sed "s/^/$shape (kernels $kernels, precompute switches $switches, $dtype): /"
    rm -f "$log"
  done
done
