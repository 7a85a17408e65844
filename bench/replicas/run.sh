#!/usr/bin/env bash
# Data-parallel replicas side by side: the same bert-base fine-tune (sequence
# classification, global batch 8 x 128 tokens, AdamW, fp32) on 1 replica, 2
# replicas in one process, and 2 MPI processes of 1 replica each. Prints
# samples/s, peak resident memory (the sum over processes) and the all-reduce
# metrics of each, in one run; the in-process pair also with sharded optimizer
# state (ZeRO-1).
#   bench/replicas/run.sh [BUILD_DIR] [--preset bert-base] [--steps 6]
set -euo pipefail
build=${1:-build}
shift || true
preset=bert-base
steps=6
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
kiln=$(cd "$build" && pwd)/bin/kiln
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$kiln" demo-data --output_dir "$work/data" > /dev/null
# A "pretrained" checkpoint to fine-tune: weights read from disk by every replica.
"$kiln" init --config "$preset" --output_dir "$work/model" --architecture BertForSequenceClassification > /dev/null
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
args() {  # output dir, per-device batch
  echo "train --model_name_or_path $work/model --tokenizer_name $work/data --train_file $work/data/train.csv" \
       "--max_seq_length 128 --pad_to_max_length --per_device_train_batch_size $2 --max_steps $steps" \
       "--save_strategy no --logging_steps $steps --learning_rate 2e-5 --output_dir $work/$1 --metrics_debug"
}
run() {  # name, command...; peak RSS per process goes to $work/$name.rss.*
  local name=$1
  shift
  "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
  local rss=0
  for f in "$work/$name".rss.*; do rss=$((rss + $(tail -1 "$f"))); done
  local sps
  sps=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['train_samples_per_second'])" "$work/$name/train_results.json")
  local ar
  ar=$(grep -E "AllReduce:" "$work/$name.log" | sed 's/^ *AllReduce: *//' || true)
  printf "%-26s %8.2f samples/s   peak RSS %6d MB   all-reduce: %s\n" "$name" "$sps" $((rss / 1024)) "${ar:-none}"
}
timed() {  # rss file prefix, command...
  local prefix=$1
  shift
  /usr/bin/time -f "%M" -o "$prefix.rss.${OMPI_COMM_WORLD_RANK:-0}" "$@"
}
export -f timed
echo "kiln $preset fine-tune, global batch 8 x 128, $steps steps (compile included), $(nproc) cores"
run one-replica timed "$work/one-replica" $kiln $(args one-replica 8)
run two-replicas-in-process timed "$work/two-replicas-in-process" $kiln $(args two-replicas-in-process 4) --num_replicas 2
run two-replicas-zero1 timed "$work/two-replicas-zero1" $kiln $(args two-replicas-zero1 4) --num_replicas 2 \
  --shard_optimizer_state
run two-mpi-processes mpirun -np 2 --oversubscribe --bind-to none $root \
  bash -c "timed $work/two-mpi-processes $kiln $(args two-mpi-processes 4)"
