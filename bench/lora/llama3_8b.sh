#!/usr/bin/env bash
# One LoRA step on Llama-3-8B's shape (llama3_8b.json: hidden 4096, 32
# layers, 32 query and 8 key/value heads, SwiGLU 14336, 128256 words): a
# fresh bf16 base written by `kiln init --torch_dtype bfloat16` (16 GB,
# streamed: init holds one tensor at a time), then `kiln bench` as `kiln
# train --use_peft` loads it (the frozen matrices bf16 and memory-mapped),
# rank 16 on every linear layer, batch 1 x 256, gradient checkpointing,
# --bf16. Prints /usr/bin/time's peak resident memory for both commands and
# removes the checkpoint unless KEEP=1. Needs ~17 GB of free disk and about
# 20 GB of available memory (the mapped base counts in the peak: its pages
# are the file's, reclaimable, but resident while the step reads them).
#   [KEEP=1] [BASE=dir] bench/lora/llama3_8b.sh [BUILD_DIR] [-- more kiln bench flags]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
base=${BASE:-$build/bench_lora_base/llama3_8b}
peak() { sed -n 's/^\tMaximum resident set size (kbytes): //p' "$1" | awk '{ printf "%.2f GB", $1 / 1048576 }'; }
log=$(mktemp -d)
trap 'rm -rf "$log"; [ "${KEEP:-0}" = 1 ] || rm -rf "$base"' EXIT
if [ ! -f "$base/model.safetensors" ]; then
  /usr/bin/time -v "$build/bin/kiln" init --config "$here/llama3_8b.json" --torch_dtype bfloat16 \
    --output_dir "$base" 2> "$log/init"
  echo "kiln init: peak RSS $(peak "$log/init"), $(sed -n 's/^\tElapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log/init")"
fi
/usr/bin/time -v "$build/bin/kiln" bench --model "$base" --task causal-lm --gradient_checkpointing --bf16 \
  --batch 1 --seq 256 --steps 1 --warmup 1 --lora_r 16 --json "$@" 2> "$log/step" | grep '^{'
echo "kiln bench (LoRA step): peak RSS $(peak "$log/step")"
