#!/usr/bin/env bash
# Runs a training job on a GPU machine and leaves the trained model where the caller collects it.
#   deploy/gpu/train.sh MODEL_DIR TRAIN.jsonl [srformer train options...]
# Builds the tools first (deploy/gpu/build.sh --no-tests; bundle from deploy/gpu/fetch-debs.sh), trains with
# --device cuda into $OUT/train (out/gpu-train/train when OUT is unset), and keeps there: the final model
# (config.json, model.safetensors, tokenizer files), train_log.jsonl and the newest checkpoint (with the
# optimizer state, to resume). With the device tool, pass the model and the data as carried paths:
#   run(command="bash deploy/gpu/train.sh out/init data/debian/train.jsonl --validation \
#       data/debian/validation.jsonl --steps 20000 --batch 64", carry=["out/init", "data/debian", "gpu-bundle"])
# NOTE: written on a machine without a GPU and never run there by its author (see docs/TRAINING.md).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -lt 2 ]; then sed -n '2,10p' "$0"; exit 2; fi
model=$1 data=$2
shift 2
out=${OUT:-out/gpu-train}/train
build=${BUILD_DIR:-build-gpu}

bash "$src/deploy/gpu/build.sh" --build "$build" --no-tests
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "train.sh: PyTorch sees no CUDA device here" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

mkdir -p "$out"
"$build/bin/srformer" train "$model" "$data" --out "$out" --device cuda --keep 1 "$@" 2>&1 | tee "$out/console.log"
echo "train.sh: trained model in $out ($(du -sh "$out" | cut -f1))"
