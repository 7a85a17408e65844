# Sourced by bench/*/run.sh, which read their arguments with bench_args,
# define kiln_side (kiln's output, its first line the JSON result) and
# torch_side (PyTorch's JSON line), then call run_rounds: ROUNDS (default 1)
# alternating pairs, each ratio and, for several, the medians
# (bench/ratios.py). Both sides get the same threads and the same malloc
# settings (BENCH_MALLOC below).

# bench_args "$@": a run.sh's arguments, [BUILD_DIR] [-- flags for both
# sides], into build and flags.
bench_args() {
  build=${1:-build}
  shift || true
  [ "${1:-}" = "--" ] && shift
  flags=("$@")
}
rounds=${ROUNDS:-1}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive whole number, got '$rounds'" >&2; exit 2; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# glibc's malloc maps each large block afresh and unmaps it when freed, so
# PyTorch, which allocates every gradient and optimizer temporary anew each
# step, page-faults all of them again every step (GPT-2 4 x 256 here: 13.4
# s a step against 6.8 s without). Both sides therefore run with glibc's
# malloc kept off mmap and untrimmed, as PyTorch's CPU tuning guides
# advise (they name jemalloc or tcmalloc); kiln plans its step's memory
# once and runs alike either way. BENCH_MALLOC=default keeps glibc's
# defaults.
bench_malloc=${BENCH_MALLOC:-tuned}
case "$bench_malloc" in
  tuned) export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1099511627776 ;;
  default) ;;
  *) echo "BENCH_MALLOC must be 'tuned' or 'default', got '$bench_malloc'" >&2; exit 2 ;;
esac
run_rounds() {
  local have_torch=1 r kiln_out torch_json
  local pairs=()
  /usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
  echo "malloc: $bench_malloc (BENCH_MALLOC; tuned: MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1 TiB for both sides)"
  for ((r = 1; r <= rounds; ++r)); do
    kiln_out=$(kiln_side "$@")
    echo "kiln:    $kiln_out"
    if [ "$have_torch" = 0 ]; then
      echo "PyTorch is not installed (Debian: apt-get install python3-torch): no reference to compare with."
      return 0
    fi
    torch_json=$(torch_side "$@")
    echo "pytorch: $torch_json"
    pairs+=("$(echo "$kiln_out" | head -1)" "$torch_json")
  done
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/ratios.py" "${pairs[@]}"
}
