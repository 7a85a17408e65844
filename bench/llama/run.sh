#!/usr/bin/env bash
# One Llama causal-LM training step (forward, backward, gradient clipping,
# AdamW) in kiln (`kiln bench --task causal-lm`) and in PyTorch side by side,
# for the config in llama-160m.json (12 layers, hidden 768, 12 query and 4
# key/value heads, SwiGLU 3072, 32000 words, untied head) or another.
#   [ROUNDS=3] [CONFIG=file.json] bench/llama/run.sh [BUILD_DIR] [-- --batch 4 --seq 256 --steps 5]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../rounds.sh"
bench_args "$@"
config=${CONFIG:-$here/llama-160m.json}
defaults=(--batch 4 --seq 256 --steps 5)
kiln_side() { "$build/bin/kiln" bench --model "$config" --task causal-lm "${defaults[@]}" "$@" --json | grep '^{'; }
torch_side() { /usr/bin/python3 "$here/llama_train_step.py" --config "$config" "${defaults[@]}" "$@"; }
run_rounds "${flags[@]}"
