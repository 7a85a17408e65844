#!/usr/bin/env bash
# The model-FLOP/s criterion (issue 8): `kiln bench` RUNS times (default 5)
# in one invocation, each run's model FLOP/s as a fraction of the GEMM peak
# that same run measured at the model's shapes, and the median. On a shared
# machine one run moves by several points with a slow minute; the median of
# several says where the code stands.
#   [RUNS=5] bench/flop_fraction.sh [BUILD_DIR] [-- kiln bench flags]
# Default flags: GPT-2 124M causal LM, batch 4 x 256, 10 steps (fresh weights).
set -euo pipefail
build=${1:-build}
shift || true
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--model gpt2 --task causal-lm --batch 4 --seq 256 --steps 10)
runs=${RUNS:-5}
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "RUNS must be a positive whole number, got '$runs'" >&2; exit 2; }
kiln="$build/bin/kiln"
[ -x "$kiln" ] || { echo "$kiln not found: build first (make build)" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

# field NAME JSON: the number after "NAME": in a one-line JSON object.
field() { sed -n "s/.*\"$1\": *\([-0-9.eE+]*\).*/\1/p" <<<"$2"; }

fractions=()
echo "kiln bench ${flags[*]} ($OMP_NUM_THREADS threads), $runs runs"
for ((r = 1; r <= runs; ++r)); do
  out=$("$kiln" bench "${flags[@]}" --json)
  json=$(grep '^{' <<<"$out" | tail -1)
  [ -n "$json" ] || { echo "run $r: kiln bench printed no JSON line:" >&2; echo "$out" >&2; exit 1; }
  step=$(field median_step_s "$json") model=$(field model_gflops "$json")
  peak=$(field gemm_peak_gflops "$json") frac=$(field fraction_of_gemm_peak "$json")
  awk -v r="$r" -v s="$step" -v m="$model" -v p="$peak" -v f="$frac" 'BEGIN {
    printf "run %d: median step %.4f s, model %.1f GFLOP/s, GEMM peak %.1f GFLOP/s -> %.1f %%\n", r, s, m, p, 100 * f }'
  fractions+=("$frac")
done
printf '%s\n' "${fractions[@]}" | sort -g | awk '{ v[NR] = $1 } END {
  med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "median of %d runs: %.1f %% of the GEMM peak (lowest %.1f, highest %.1f; the target is 85 %%)\n",
         NR, 100 * med, 100 * v[1], 100 * v[NR] }'
