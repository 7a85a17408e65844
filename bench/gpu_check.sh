#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (one H200 here): builds kiln with
# KILN_CUDA=ON, runs the CUDA tests (CUDA against the CPU backend, op by op
# and on tiny BERT / GPT-2 / T5 training), then times training steps on the
# GPU: BERT-base (batch 32 x 128) and GPT-2 (batch 16 x 1024), fp32.
#
#   bash bench/gpu_check.sh [OUT_DIR]     (default ./gpu-results)
#
# Writes OUT_DIR/summary.txt (what passed, the step times) and one log per
# stage. Budget: under 8 minutes on 16 cores: each stage has a timeout, all
# of them end by 470 s, and a failed test or bench stage does not stop the
# later ones. Environment: JOBS (16), BUILD (build-gpu), CUDA_ARCH (90:
# H100/H200; the build adds compute_90 PTX).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
CUDA_ARCH=${CUDA_ARCH:-90}
START=$(date +%s)
: > "$OUT/summary.txt"

log() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }

# stage NAME TIMEOUT_S COMMAND...: runs it with its output in OUT/NAME.log,
# for at most TIMEOUT_S seconds and never past the whole check's 470 s.
stage() {
  local name=$1 limit=$2
  shift 2
  local left=$((START + 470 - $(date +%s)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -le 0 ]; then log "$name: SKIPPED (the check's 470 s are spent)"; return 124; fi
  log "$name: $*"
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then log "$name: ok"; else log "$name: FAILED (exit $rc; $( [ $rc -eq 124 ] && echo "timed out after ${limit}s, " )see $name.log)"; tail -n 15 "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/summary.txt"; fi
  return $rc
}

{
  nvidia-smi || echo "nvidia-smi: not found"
  command -v nvcc && nvcc --version
  cmake --version | head -1
  nproc
} > "$OUT/machine.log" 2>&1
log "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# 1. Configure and build what the check runs (about 2 minutes on 16 cores),
# or, when this machine cannot build kiln (missing packages), unpack the
# binaries bench/gpu_bundle.sh made elsewhere (gpu-bundle.tar.xz, carried).
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle.tar.xz}
BIN=$BUILD/bin
if stage configure 60 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"; then
  stage build 220 cmake --build "$BUILD" -j "$JOBS" --target test_backend_cuda test_io kiln_cli || exit 1
elif [ -f "$BUNDLE" ]; then
  log "configure failed (missing packages? see configure.log): using the prebuilt $BUNDLE"
  mkdir -p "$BUILD/prebuilt" && tar -C "$BUILD/prebuilt" -xJf "$BUNDLE" || exit 1
  log "prebuilt from commit $(cat "$BUILD/prebuilt/bundle/COMMIT"); this tree is at $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"
  BIN=$BUILD/prebuilt/bundle/bin
  export LD_LIBRARY_PATH=$BUILD/prebuilt/bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export KILN_TEST_DATA_DIR=$ROOT/tests/data
else
  log "configure failed and there is no $BUNDLE: kiln needs the packages of scripts/install-deps.sh"
  log "(oneDNN, OpenBLAS, OpenMPI, sentencepiece, PCRE2, ICU, nlohmann-json, GoogleTest) besides the CUDA"
  log "toolkit; make the bundle on a build machine with bench/gpu_bundle.sh and carry it. See configure.log"
  exit 1
fi

# 2. The CUDA tests (they skip, saying so, if the GPU is not visible).
stage test_backend_cuda 100 "$BIN/test_backend_cuda" --gtest_output="xml:$OUT/test_backend_cuda.xml"
grep -E "^\[==========\] [0-9]+ tests|^\[  (PASSED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \]" "$OUT/test_backend_cuda.log" |
  tee -a "$OUT/summary.txt"
grep -q "Skipped" "$OUT/test_backend_cuda.log" &&
  log "WARNING: GPU tests skipped: $(grep -m1 -A1 'Skipped' "$OUT/test_backend_cuda.log" | tail -1)"
[ -x "$BIN/test_io" ] && stage test_io_safetensors 20 "$BIN/test_io" --gtest_filter='Safetensors.*'

# 3. Training-step timings on the GPU (fp32, AdamW, gradient clipping).
stage bench_bert_base 50 "$BIN/kiln" bench --model bert-base --task masked-lm --batch 32 --seq 128 \
  --steps 10 --warmup 2 --device cuda --json
stage bench_gpt2 90 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 5 --warmup 2 --device cuda --json
for b in bench_bert_base bench_gpt2; do
  grep -E "^kiln bench|median step|tokens/s|model FLOP|device" "$OUT/$b.log" | sed "s/^/$b: /" | tee -a "$OUT/summary.txt"
done
log "done"
