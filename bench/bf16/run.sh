#!/usr/bin/env bash
# --bf16 on the CPU side by side: one training step of bert-base 8 x 128 and
# GPT-2 124M 4 x 256 (forward, backward, AdamW) in kiln fp32, kiln --bf16 and
# PyTorch under torch.autocast("cpu", dtype=torch.bfloat16), alternated
# ROUNDS times in one invocation, then per mode the median step time with
# its spread, the peak resident memory, and the ratios the bf16 targets name
# (docs/performance.md).
#   [ROUNDS=3] [STEPS=3] [MODELS="bert gpt2"] [TORCH_FP32=1] bench/bf16/run.sh [BUILD_DIR]
# TORCH_FP32=1 also runs PyTorch in fp32. The machine's load (uptime) is
# printed before and after: on a shared machine compare only runs of one
# invocation.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${ROUNDS:-3}
steps=${STEPS:-3}
models=${MODELS:-bert gpt2}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive whole number, got '$rounds'" >&2; exit 2; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "STEPS must be a positive whole number, got '$steps'" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# The same malloc settings as bench/rounds.sh gives both sides.
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
[ "$have_torch" = 1 ] || echo "PyTorch is not installed (Debian: apt-get install python3-torch): kiln's modes only."
echo "load before: $(uptime)"
rows=()
for model in $models; do
  case "$model" in
    bert) kiln_args=(--model bert-base --batch 8 --seq 128) torch_cmd=("$here/../bert/bert_train_step.py" --batch 8 --seq 128) ;;
    gpt2) kiln_args=(--model gpt2 --task causal-lm --batch 4 --seq 256) torch_cmd=("$here/../gpt2/gpt2_train_step.py" --batch 4 --seq 256) ;;
    *) echo "MODELS: 'bert' or 'gpt2', got '$model'" >&2; exit 2 ;;
  esac
  for ((r = 1; r <= rounds; ++r)); do
    for mode in fp32 bf16 torch-bf16 torch-fp32; do
      case "$mode" in
        fp32) out=$("$build/bin/kiln" bench "${kiln_args[@]}" --steps "$steps" --warmup 1 --json | tail -1) ;;
        bf16) out=$("$build/bin/kiln" bench "${kiln_args[@]}" --steps "$steps" --warmup 1 --bf16 --json | tail -1) ;;
        torch-bf16) [ "$have_torch" = 1 ] || continue
          out=$(/usr/bin/python3 "${torch_cmd[@]}" --steps "$steps" --warmup 1 --bf16) ;;
        torch-fp32) [ "$have_torch" = 1 ] && [ "${TORCH_FP32:-0}" = 1 ] || continue
          out=$(/usr/bin/python3 "${torch_cmd[@]}" --steps "$steps" --warmup 1) ;;
      esac
      echo "$model $mode round $r: $out"
      rows+=("{\"model\": \"$model\", \"mode\": \"$mode\", \"run\": $out}")
    done
  done
done
echo "load after: $(uptime)"
/usr/bin/python3 "$here/summary.py" "${rows[@]}"
