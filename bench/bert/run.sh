#!/usr/bin/env bash
# One BERT training step (forward, backward, AdamW; fp32; CPU) in kiln and in
# PyTorch, side by side in one run, with the ratio.
#   [ROUNDS=3] bench/bert/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 8 --seq 128 --steps 10]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median: on a shared machine a slow minute moves one round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../rounds.sh"
bench_args "$@"
kiln_side() { "$build/bin/bench_bert_step" "$@"; }
torch_side() { /usr/bin/python3 "$here/bert_train_step.py" "$@"; }
run_rounds "${flags[@]}"
