#!/usr/bin/env bash
# One T5 sequence-to-sequence training step (t5-small: forward, backward,
# gradient clipping, AdamW) in kiln (`kiln bench --task seq2seq`) and in
# PyTorch side by side.
#   [ROUNDS=3] bench/t5/run.sh [BUILD_DIR] [-- --batch 8 --seq 128 --target_len 32 --steps 5]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../rounds.sh"
bench_args "$@"
defaults=(--batch 8 --seq 128 --target_len 32 --steps 5)
kiln_side() { "$build/bin/kiln" bench --model t5-small --task seq2seq "${defaults[@]}" "$@" --json | grep '^{'; }
torch_side() { /usr/bin/python3 "$here/t5_train_step.py" "${defaults[@]}" "$@"; }
run_rounds "${flags[@]}"
