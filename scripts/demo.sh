#!/usr/bin/env bash
# The main job: a real fine-tuning run on the demo data kiln generates itself.
# Writes the data set and vocabulary, trains a small BERT from scratch with
# periodic evaluation, saves it, and predicts a few new sentences.
#   scripts/demo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
kiln="$build/bin/kiln"
work="$build/demo"
rm -rf "$work"
"$kiln" demo-data --output_dir "$work/data"
"$kiln" train \
  --config_name "$work/data/model_config.json" --tokenizer_name "$work/data" \
  --task text-classification --train_file "$work/data/train.csv" --validation_file "$work/data/validation.csv" \
  --max_seq_length 32 --pad_to_max_length \
  --output_dir "$work/model" \
  --num_train_epochs 4 --per_device_train_batch_size 32 --per_device_eval_batch_size 64 \
  --learning_rate 2e-3 --warmup_ratio 0.1 --weight_decay 0.01 \
  --eval_strategy epoch --save_strategy epoch --save_total_limit 2 --logging_steps 25 \
  --load_best_model_at_end --metric_for_best_model accuracy --seed 42 \
  | tee "$work/train.log"
"$kiln" predict --model_name_or_path "$work/model" --test_file "$work/data/test.txt" --output "$work/predictions.jsonl"
echo
echo "predictions for new sentences ($work/predictions.jsonl):"
paste -d' ' "$work/data/test.txt" "$work/predictions.jsonl"
acc=$(sed -n 's/^eval_accuracy = //p' "$work/train.log")
echo
echo "validation accuracy: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.95) }' || { echo "demo: validation accuracy below 0.95" >&2; exit 1; }
