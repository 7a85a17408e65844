#!/usr/bin/env bash
# One GPT-2 training step in kiln and in PyTorch side by side, and kiln's
# generation tokens/s with and without the key/value cache.
#   [ROUNDS=3] bench/gpt2/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 4 --seq 256 --steps 5]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median: on a shared machine a slow minute moves one round.
set -euo pipefail
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-1}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive whole number, got '$rounds'" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
pairs=()
for ((r = 1; r <= rounds; ++r)); do
  kiln_out=$("$build/bin/bench_gpt2" "$@")
  echo "$kiln_out"
  if [ "$have_torch" = 0 ]; then
    echo "PyTorch is not installed (Debian: apt-get install python3-torch): no reference to compare with."
    exit 0
  fi
  torch_json=$(/usr/bin/python3 "$here/gpt2_train_step.py" $(echo "$@" | sed 's/--gen_tokens [0-9]*//'))
  echo "pytorch: $torch_json"
  pairs+=("$(echo "$kiln_out" | head -1)" "$torch_json")
done
/usr/bin/python3 "$here/../ratios.py" "${pairs[@]}"
