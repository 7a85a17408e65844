#!/usr/bin/env bash
# One LoRA training step of a Llama causal LM (rank 16 on every linear layer
# of the decoder layers, the base frozen, AdamW on the adapters, gradient
# clipping, per-layer gradient checkpointing) in kiln (`kiln bench --lora_r`)
# and in PyTorch (torch_lora_step.py) side by side, for TinyLlama's shape
# (tinyllama.json: 22 layers, hidden 2048, 32 query and 4 key/value heads,
# SwiGLU 5632, 32000 words) or another config.
#   [ROUNDS=3] [CONFIG=file.json] bench/lora/run.sh [BUILD_DIR] [-- --batch 4 --seq 256 --steps 2 --bf16]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../rounds.sh"
bench_args "$@"
config=${CONFIG:-$here/tinyllama.json}
defaults=(--batch 4 --seq 256 --steps 2 --warmup 1 --lora_r 16)
# kiln's base: fresh weights saved as a bf16 checkpoint (kiln init
# --torch_dtype bfloat16), loaded as `kiln train --use_peft` loads a base:
# the frozen matrices stay bf16 and memory-mapped.
base="$build/bench_lora_base/$(basename "$config" .json)"
if [ ! -f "$base/model.safetensors" ] || [ "$base/model.safetensors" -ot "$config" ]; then
  "$build/bin/kiln" init --config "$config" --torch_dtype bfloat16 --output_dir "$base" >&2
fi
kiln_side() {
  "$build/bin/kiln" bench --model "$base" --task causal-lm --gradient_checkpointing "${defaults[@]}" "$@" --json |
    grep '^{'
}
torch_side() { /usr/bin/python3 "$here/torch_lora_step.py" --config "$config" "${defaults[@]}" "$@"; }
run_rounds "${flags[@]}"
