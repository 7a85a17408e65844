#!/usr/bin/env bash
# One GPT-2 training step in kiln and in PyTorch side by side, and kiln's
# generation tokens/s with and without the key/value cache.
#   [ROUNDS=3] bench/gpt2/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 4 --seq 256 --steps 5]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median: on a shared machine a slow minute moves one round.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../rounds.sh"
bench_args "$@"
kiln_side() { "$build/bin/bench_gpt2" "$@"; }
torch_side() { /usr/bin/python3 "$here/gpt2_train_step.py" $(echo "$@" | sed 's/--gen_tokens [0-9]*//'); }
run_rounds "${flags[@]}"
