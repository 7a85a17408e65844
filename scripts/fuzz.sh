#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets of fuzz/ with clang in build-fuzz
# and runs each for FUZZ_SECONDS seconds (docs/fuzzing.md). Each target
# starts from its seeds (fuzz/corpus/<name>, copied into
# build-fuzz/corpus/<name>, which keeps what earlier runs found) and its
# dictionary (fuzz/dict/<name>.dict). Prints the executions per target and
# their total; exits non-zero when any target finds a crash, a leak, a
# timeout or an out-of-memory, whose input is saved under build-fuzz/findings.
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_TARGETS   which targets (default: all, in fuzz/CMakeLists.txt's order)
#   FUZZ_ARGS      more libFuzzer flags, e.g. "-max_len=65536"
#   FUZZ_JOBS      build parallelism (default: all cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-fuzz
seconds=${FUZZ_SECONDS:-60}
all=$(sed -n 's/^set(KILN_FUZZ_TARGETS \(.*\))$/\1/p' fuzz/CMakeLists.txt)
targets=${FUZZ_TARGETS:-$all}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF -DKILN_CUDA=OFF > /dev/null
cmake --build "$build" -j "${FUZZ_JOBS:-$(nproc)}" --target $(printf 'fuzz_%s ' $targets)

mkdir -p "$build/findings" "$build/logs"
total=0
failed=()
printf '%-18s %14s %8s  %s\n' target executions exec/s result
for t in $targets; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2> /dev/null || true
  flags=(-max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048
         -artifact_prefix="$build/findings/$t-")
  [[ -f fuzz/dict/$t.dict ]] && flags+=(-dict=fuzz/dict/$t.dict)
  log="$build/logs/$t.log"
  # The compile-cache target writes this build's records into its corpus first.
  status=0
  KILN_FUZZ_SEED_DIR=$([[ $t == program_cache ]] && echo "$corpus" || echo "") OMP_NUM_THREADS=1 \
    UBSAN_OPTIONS=print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS} \
    "$build/bin/fuzz_$t" "${flags[@]}" ${FUZZ_ARGS:-} "$corpus" > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  result=ok
  if [[ $status -ne 0 || -z $runs ]]; then
    result="FAILED (exit $status): see $log"
    failed+=("$t")
  fi
  total=$((total + ${runs:-0}))
  printf '%-18s %14s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "$result"
done
printf '%-18s %14s\n' total "$total"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: findings in ${failed[*]}: inputs in $build/findings (add each to fuzz/corpus/<target>/ once fixed)" >&2
  exit 1
fi
