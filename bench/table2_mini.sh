#!/usr/bin/env bash
# A miniature of the paper's Table 2 / Figure 4 on our own data: one model, fine-tuned the same number of
# updates with full, segmented and srformer cross-attention at several segment sizes, then scored with
# ROUGE (95% bootstrap intervals) on the test split. Prints a Markdown table.
#   bash bench/table2_mini.sh [BUILD_DIR]
# As in the paper, every variant starts from the same pretrained model: BASE (a model directory, e.g. one
# trained with full attention by `srformer train`); without BASE, from one random initialisation.
# Env: BASE, DATA (data/debian: tools/data/build_dataset.py output), OUT (out/table2), STEPS (600), BATCH (16),
#      LR (3e-3), WARMUP (0), D_MODEL (64), LAYERS (2), VOCAB (2000), TEST_N (500), THREADS (2),
#      VARIANTS ("full:0 segmented:8 srformer:8 segmented:16 srformer:16 srformer:64"),
#      MAX_INPUT (256), MAX_TARGET (32: also SRformer's expected length L), DROPOUT (0: as the recorded runs;
#      a BASE whose config lacks dropout fields would otherwise train with Hugging Face's 0.1),
#      RAF_INIT_WEIGHT_SCALE (1: the authors' SNN_kv init; e.g. 0.01 starts the recurrent term small, and the
#      variants' directories get a -w0.01 suffix).
# Each step's output goes to OUT/init.log, OUT/NAME.train.log or OUT/NAME.eval.log; a step that fails ends
# the script with the end of its log.
# The paper's Table 3 ablations (I: recurrent term only; II: no division by ||K||; III: no RAF, P used
# directly; IV: RAF fed K_i^T V_i instead of P) are the same run with other variants:
#   VARIANTS="segmented:16 srformer:16 ablation_i:16 ablation_ii:16 ablation_iii:16 ablation_iv:16" OUT=out/table3
# The long-document run (RFC introductions -> abstracts, tools/data/build_rfc_dataset.py) is
#   DATA=data/rfc OUT=out/table2-rfc MAX_INPUT=384 MAX_TARGET=96 BASE=... bash bench/table2_mini.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin="$build/bin/srformer"
data=${DATA:-data/debian}
out=${OUT:-out/table2}
steps=${STEPS:-600}
variants=${VARIANTS:-"full:0 segmented:8 srformer:8 segmented:16 srformer:16 srformer:64"}
[ -x "$bin" ] || { echo "table2_mini: build $bin first" >&2; exit 1; }
[ -f "$data/train.jsonl" ] || { echo "table2_mini: no $data/train.jsonl; run tools/data/build_dataset.py" >&2; exit 1; }
mkdir -p "$out"
# run_logged LOG WHAT CMD...: CMD with its output in LOG; when it fails, says so with the end of LOG (a step
# that failed ended the script with exit 1 and not a word, its output in /dev/null or a log it did not name).
run_logged() {
  local log=$1 what=$2 status=0
  shift 2
  "$@" >"$log" 2>&1 || status=$?
  [ $status -eq 0 ] && return 0
  { echo "table2_mini: $what failed (exit $status); $log ends:"; tail -20 "$log"; } >&2
  exit $status
}

# One initialisation for every variant: a plain (full) model, converted per variant (the RAF parameters of
# the srformer variants get the authors' initial values, the same for every segment size).
init=${BASE:-$out/init}
if [ ! -f "$init/config.json" ]; then
  run_logged "$out/init.log" "init-model" "$bin" init-model --corpus "$data/train.jsonl" --vocab "${VOCAB:-2000}" \
    --cross-attention full --d-model "${D_MODEL:-64}" --heads 4 --layers "${LAYERS:-2}" "$init"
fi
rows=()
for v in $variants; do
  kind=${v%%:*} seg=${v##*:}
  name=$kind
  [ "$seg" = 0 ] || name=$kind-$seg
  scale=${RAF_INIT_WEIGHT_SCALE:-1}
  [ "$scale" = 1 ] || [ "$kind" = full ] || [ "$kind" = segmented ] || name=$name-w$scale
  if [ ! -f "$out/$name/model.safetensors" ]; then
    if [ "$kind" = full ]; then
      "$bin" convert "$init" "$out/$name-init" --cross-attention full >/dev/null
    else
      raf=()  # only the variants with a RAF neuron take its initial scale (convert refuses it elsewhere)
      case "$kind" in srformer | ablation_i | ablation_ii | ablation_iv) raf=(--raf-init-weight-scale "$scale") ;; esac
      "$bin" convert "$init" "$out/$name-init" --cross-attention "$kind" --segment-size "$seg" "${raf[@]}" >/dev/null
    fi
    start=$(date +%s)
    resume=()  # a run cut short continues from its newest checkpoint
    compgen -G "$out/$name/checkpoint-*/trainer_state.json" >/dev/null && resume=(--resume)
    run_logged "$out/$name.train.log" "training $name" \
      "$bin" train "$out/$name-init" "$data/train.jsonl" --out "$out/$name" "${resume[@]}" --steps "$steps" --batch "${BATCH:-16}" \
      --lr "${LR:-3e-3}" --warmup "${WARMUP:-0}" --max-input-tokens "${MAX_INPUT:-256}" --max-target-tokens "${MAX_TARGET:-32}" --log-every 50 --threads "${THREADS:-2}" --dropout "${DROPOUT:-0}"
    echo "$(( $(date +%s) - start ))" > "$out/$name.seconds"
  fi
  if [ ! -f "$out/$name.eval/scores.json" ]; then
    run_logged "$out/$name.eval.log" "evaluating $name" \
      "$bin" eval "$out/$name" "$data/test.jsonl" --limit "${TEST_N:-500}" --batch 32 --max-input-tokens "${MAX_INPUT:-256}" --out "$out/$name.eval" \
      --threads "${THREADS:-2}"
  fi
  rows+=("$name $kind $seg")
done

/usr/bin/python3 - "$out" "${rows[@]}" <<'PY'
import json, sys
out = sys.argv[1]
print("| cross-attention | segment | train loss (first / last 50 updates) | train time | ROUGE-1 | ROUGE-2 | ROUGE-L |")
print("|---|---|---|---|---|---|---|")
for row in sys.argv[2:]:
    name, kind, seg = row.split()
    log = [json.loads(l) for l in open(f"{out}/{name}/train_log.jsonl")]
    losses = [e["loss"] for e in log if "loss" in e]  # logged every 50 updates
    secs = open(f"{out}/{name}.seconds").read().strip()
    s = json.load(open(f"{out}/{name}.eval/scores.json"))["rouge"]
    cell = lambda t: "%.2f [%.2f, %.2f]" % tuple(100 * s[t]["fmeasure"][k] for k in ("mid", "low", "high"))
    print(f"| {kind} | {seg if seg != '0' else '-'} | {losses[0]:.3f} / {losses[-1]:.3f} | {secs} s | {cell('rouge1')} | {cell('rouge2')} | {cell('rougeL')} |")
PY
