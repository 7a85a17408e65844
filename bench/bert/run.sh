#!/usr/bin/env bash
# One BERT training step (forward, backward, AdamW; fp32; CPU) in kiln and in
# PyTorch, side by side in one run, with the ratio.
#   [ROUNDS=3] bench/bert/run.sh [BUILD_DIR] [-- flags for both, e.g. --layers 12 --batch 8 --seq 128 --steps 10]
# ROUNDS (default 1) alternates the two ROUNDS times and prints each round's
# ratio and the median: on a shared machine a slow minute moves one round.
set -euo pipefail
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-1}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive whole number, got '$rounds'" >&2; exit 2; }
# Both sides use the same thread count (PyTorch would default to physical cores).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
have_torch=1
/usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
pairs=()
for ((r = 1; r <= rounds; ++r)); do
  kiln_json=$("$build/bin/bench_bert_step" "$@")
  echo "kiln:    $kiln_json"
  if [ "$have_torch" = 0 ]; then
    echo "PyTorch is not installed (Debian: apt-get install python3-torch): no reference to compare with."
    exit 0
  fi
  torch_json=$(/usr/bin/python3 "$here/bert_train_step.py" "$@")
  echo "pytorch: $torch_json"
  pairs+=("$kiln_json" "$torch_json")
done
/usr/bin/python3 "$here/../ratios.py" "${pairs[@]}"
