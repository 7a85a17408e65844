#!/usr/bin/env bash
# Tokens/s of real (non-padding) tokens in SFT training of a small Llama
# (config.json: 4 layers, hidden 256) on 400 rows of 10-512 tokens, EPOCHS (2)
# epochs:
#   padded     batches of 8 examples padded to the longest (a multiple of 128)
#   composite  --packing, attention spelled out with the [B,1,T,T] block-diagonal
#              mask (KILN_ATTENTION=composite: what packing took before the
#              fused kernel took segment ids)
#   fused      --packing, the fused CPU kernel with segment ids
# Packed batches are 4 rows of up to 512 tokens (about the real tokens of 8
# padded examples). train_runtime includes compiling each batch shape; the CPU
# time (all threads, the whole run) is steadier on a shared machine.
#   bench/packing/run.sh [BUILD_DIR]     (python3 with `tokenizers` for the data)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
epochs=${EPOCHS:-2}
tokdir=$here/../../tests/goldens/sft/tokenizer
${PYTHON:-python3} "$here/make_data.py" "$tokdir/tokenizer.json" "$work/data.jsonl"
common=(train --config_name "$here/config.json" --tokenizer_name "$tokdir" --train_file "$work/data.jsonl"
        --task sft --max_length 512 --num_train_epochs "$epochs" --logging_steps 1000 --seed 1 --save_strategy no
        --pad_to_multiple_of 128 --learning_rate 1e-4)
run() {  # name, env, flags...: wall and CPU seconds of the whole run, the training's own runtime
  local name=$1 envs=$2
  shift 2
  local TIMEFORMAT='%R %U %S' times
  times=$( { time env $envs "$build/bin/kiln" "${common[@]}" --output_dir "$work/$name" "$@" \
             2>"$work/$name.log" >/dev/null; } 2>&1 )
  local tokens runtime cpu
  tokens=$(grep -o '[0-9]* tokens' "$work/$name.log" | head -1 | cut -d' ' -f1)
  runtime=$(grep -o '"train_runtime": *[0-9.]*' "$work/$name/all_results.json" | grep -o '[0-9.]*$')
  cpu=$(echo "$times" | awk '{print $2 + $3}')
  printf '%-10s %d real tokens x %d epochs: train_runtime %7.1f s (%6.0f tokens/s), CPU %7.1f s (%6.0f tokens/CPU s)\n' \
    "$name" "$tokens" "$epochs" "$runtime" "$(echo "$epochs * $tokens / $runtime" | bc -l)" "$cpu" \
    "$(echo "$epochs * $tokens / $cpu" | bc -l)"
}
run padded "KILN_ATTENTION=auto" --per_device_train_batch_size 8
run composite "KILN_ATTENTION=composite" --per_device_train_batch_size 4 --packing
run fused "KILN_ATTENTION=auto" --per_device_train_batch_size 4 --packing
