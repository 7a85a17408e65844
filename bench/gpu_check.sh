#!/usr/bin/env bash
# The CUDA backend's check on a GPU machine (one H200 here): builds kiln with
# KILN_CUDA=ON (or unpacks the bundle bench/gpu_bundle.sh made), runs every
# CUDA test in its own process (CUDA against the CPU backend, op by op and on
# tiny BERT / GPT-2 / T5 training), the device tests again with every fused
# program generated (NVRTC) and with none (the interpreter), tiny GPT-2 under
# compute-sanitizer, the demo fine-tuning on the GPU, then times training
# steps: bert-base classification (batch 32 x 128) and GPT-2 (batch 16 x
# 1024), fp32, --tf32 and --bf16, with a KILN_PROFILE run of GPT-2, and PyTorch 2 on the same
# models (Hugging Face's; fp32, bf16 and bf16 + torch.compile;
# bench/gpu/torch_ref.py).
#
#   bash bench/gpu_check.sh [OUT_DIR]     (default ./gpu-results)
#
# Writes OUT_DIR/summary.txt (what passed, the step times) and
# OUT_DIR/logs.tar.gz (one log per stage). Budget: each stage has a timeout
# and all of them end by BUDGET seconds (420); a failed stage does not stop
# the later ones. Without the PyTorch runs (SKIP below) it takes about 100 s
# on an H200. Environment: JOBS (16), BUILD (build-gpu), CUDA_ARCH (90:
# H100/H200; the build adds compute_90 PTX), USE_BUNDLE=1 (skip building
# here, use the carried gpu-bundle.tar.xz), SKIP (stage names to skip, e.g.
# "torch_gpt2 torch_bert_base profile_gpt2"), TORCH_MODES (the PyTorch
# runs' modes, fp32,tf32,bf16,bf16-compile), SANITIZE_TESTS (the tests
# compute-sanitizer runs when none failed).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
LOGS=$OUT/logs
mkdir -p "$LOGS"
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-16}
CUDA_ARCH=${CUDA_ARCH:-90}
BUDGET=${BUDGET:-420}
SKIP=" ${SKIP:-} "
START=$(date +%s)
: > "$OUT/summary.txt"

log() { echo "[$(($(date +%s) - START))s] $*" | tee -a "$OUT/summary.txt"; }
finish() {
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOGS"
  log "done (logs in logs.tar.gz)"
}
trap finish EXIT

# stage NAME TIMEOUT_S COMMAND...: runs it with its output in LOGS/NAME.log,
# for at most TIMEOUT_S seconds and never past the whole check's BUDGET.
stage() {
  local name=$1 limit=$2
  shift 2
  case "$SKIP" in *" $name "*) log "$name: skipped (SKIP)"; return 0 ;; esac
  local left=$((START + BUDGET - $(date +%s)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -le 0 ]; then log "$name: SKIPPED (the check's $BUDGET s are spent)"; return 124; fi
  log "$name: $*"
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then log "$name: ok"; else
    log "$name: FAILED (exit $rc$( [ $rc -eq 124 ] && echo ", timed out after ${limit}s"))"
    tail -n 25 "$LOGS/$name.log" | cut -c1-400 | sed 's/^/    /' | tee -a "$OUT/summary.txt"
  fi
  return $rc
}

{
  nvidia-smi || echo "nvidia-smi: not found"
  command -v nvcc && nvcc --version
  cmake --version | head -1
  nproc
  ldd --version | head -1
} > "$LOGS/machine.log" 2>&1
log "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# 1. Configure and build what the check runs (about 2 minutes on 16 cores),
# or, when this machine cannot build kiln (missing packages) or USE_BUNDLE=1,
# unpack the binaries bench/gpu_bundle.sh made elsewhere (carried).
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle.tar.xz}
BIN=$BUILD/bin
use_bundle() {
  mkdir -p "$BUILD/prebuilt" && tar -C "$BUILD/prebuilt" -xJf "$BUNDLE" || exit 1
  log "prebuilt from commit $(cat "$BUILD/prebuilt/bundle/COMMIT"); this tree is at $(git -C "$ROOT" rev-parse HEAD 2>/dev/null)"
  BIN=$BUILD/prebuilt/bundle/bin
  # CUDA's runtime, cuBLAS and NVRTC from the machine: its toolkit, else
  # PyTorch's wheels (kiln opens cuBLAS and NVRTC by soname on first use).
  local cudalibs
  cudalibs=$(find -H /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/local/nvidia /opt /usr/lib -maxdepth 10 \
    \( -name 'libcublasLt.so.13*' -o -name 'libcudart.so.13*' -o -name 'libcublas.so.13*' -o -name 'libnvrtc.so.13*' \) 2>/dev/null |
    xargs -r -n1 dirname | awk '!seen[$0]++' | paste -sd:)
  log "CUDA libraries from: ${cudalibs:-none found}"
  export LD_LIBRARY_PATH=$BUILD/prebuilt/bundle/lib:${cudalibs:+$cudalibs:}${LD_LIBRARY_PATH:-}
  export KILN_TEST_DATA_DIR=$ROOT/tests/goldens
}
if [ "${USE_BUNDLE:-0}" = 1 ] && [ -f "$BUNDLE" ]; then
  use_bundle
elif stage configure 60 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH"; then
  stage build 220 cmake --build "$BUILD" -j "$JOBS" --target test_backend_cuda test_io kiln_cli || exit 1
elif [ -f "$BUNDLE" ]; then
  log "configure failed (missing packages? see configure.log): using the prebuilt $BUNDLE"
  use_bundle
else
  log "configure failed and there is no $BUNDLE: kiln needs the packages of scripts/install-deps.sh"
  log "(oneDNN, OpenBLAS, OpenMPI, sentencepiece, PCRE2, ICU, nlohmann-json, GoogleTest) besides the CUDA"
  log "toolkit; make the bundle on a build machine with bench/gpu_bundle.sh and carry it. See configure.log"
  exit 1
fi
ldd "$BIN/kiln" > "$LOGS/ldd.log" 2>&1
grep -q "not found" "$LOGS/ldd.log" && log "WARNING: missing libraries: $(grep 'not found' "$LOGS/ldd.log" | tr -s ' \t' ' ')"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
# The generated kernels' disk cache: fresh for this check, so compile times show.
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-$(mktemp -d)}

# 2. The CUDA tests, each in its own process so that a crash hides nothing
# (they skip, saying so, if the GPU is not visible); a failing one is run
# again under compute-sanitizer (memcheck) once.
tests=$("$BIN/test_backend_cuda" --gtest_list_tests | awk '/^[^ ]/ {s=$1} /^  / {print s $1}')
failed=()
for t in $tests; do
  stage "t_$t" 60 "$BIN/test_backend_cuda" --gtest_filter="$t" || failed+=("$t")
  grep -q "SKIPPED \]" "$LOGS/t_$t.log" && log "  $t skipped: $(grep -m1 -B1 'SKIPPED \]' "$LOGS/t_$t.log" | head -1)"
done
log "CUDA tests: $(echo $tests | wc -w) run, ${#failed[@]} failed: ${failed[*]:-none}"
# Fused programs of 2^16 elements and more run as generated kernels (NVRTC),
# smaller ones on the device interpreter (KILN_CUDA_FUSED=auto): the tiny
# models above ran on the interpreter. The device tests again with every
# fused program generated, then with none.
stage tests_generated 150 env KILN_CUDA_FUSED=generate "$BIN/test_backend_cuda" \
  --gtest_filter='CudaOps.*:CudaFused.*:CudaModels.TinyBert*:CudaModels.TinyGpt2*:CudaModels.Bf16*'
stage tests_interpreter 90 env KILN_CUDA_FUSED=interpret "$BIN/test_backend_cuda" \
  --gtest_filter='CudaOps.*:CudaFused.*:CudaModels.*'
for m in generated interpreter; do
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[       OK \]" "$LOGS/tests_$m.log" | sed "s/^/  $m: /" | tee -a "$OUT/summary.txt"
done
if command -v compute-sanitizer > /dev/null; then
  stage sanitize 90 compute-sanitizer --tool memcheck --show-backtrace device --print-limit 20 \
    env KILN_CUDA_FUSED=generate "$BIN/test_backend_cuda" \
    --gtest_filter="${failed[0]:-${SANITIZE_TESTS:-CudaModels.TinyGpt2TrainsAsOnTheCpu:CudaOps.FusedAttentionMatchesTheCpu}}"
  grep -E "ERROR SUMMARY" "$LOGS/sanitize.log" | tee -a "$OUT/summary.txt"
fi

# 3. The demo fine-tuning (scripts/demo.sh's run) on the GPU.
demo=$OUT/demo
stage demo_data 20 "$BIN/kiln" demo-data --output_dir "$demo/data"
stage demo 90 "$BIN/kiln" train --device cuda \
  --config_name "$demo/data/model_config.json" --tokenizer_name "$demo/data" \
  --task text-classification --train_file "$demo/data/train.csv" --validation_file "$demo/data/validation.csv" \
  --max_seq_length 32 --pad_to_max_length --output_dir "$demo/model" \
  --num_train_epochs 4 --per_device_train_batch_size 32 --per_device_eval_batch_size 64 \
  --learning_rate 2e-3 --warmup_ratio 0.1 --weight_decay 0.01 --eval_strategy epoch --save_strategy no \
  --logging_steps 25 --seed 42
log "demo: $(grep -E 'eval_accuracy|train_runtime' "$LOGS/demo.log" | tr '\n' ' ')"
rm -rf "$demo"

# 4. Training-step timings on the GPU (fp32, AdamW, gradient clipping),
# kiln then PyTorch on the same model, batch and optimizer.
stage bench_bert_base 50 "$BIN/kiln" bench --model bert-base --task text-classification --batch 32 --seq 128 \
  --steps 10 --warmup 2 --device cuda
stage bench_gpt2 90 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 5 --warmup 2 --device cuda
# The same with TF32 tensor-core products (--tf32).
stage bench_bert_base_tf32 50 "$BIN/kiln" bench --model bert-base --task text-classification --batch 32 --seq 128 \
  --steps 10 --warmup 2 --device cuda --tf32
stage bench_gpt2_tf32 90 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 5 --warmup 2 --device cuda --tf32
# bf16 products (--bf16: bf16 tensor-core GEMMs, f32 master weights).
stage bench_bert_base_bf16 50 "$BIN/kiln" bench --model bert-base --task text-classification --batch 32 --seq 128 \
  --steps 10 --warmup 2 --device cuda --bf16
stage bench_gpt2_bf16 90 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 5 --warmup 2 --device cuda --bf16 --gemm_shapes
# cuBLASLt's record of the kernels it picked for one bf16 GPT-2 step (the first lines per shape).
CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=$LOGS/cublas_api.log CUBLASLT_LOG_LEVEL=5 \
  CUBLASLT_LOG_FILE=$LOGS/cublaslt_%i.log stage cublas_log 60 "$BIN/kiln" bench --model gpt2 \
  --task causal-lm --batch 16 --seq 1024 --steps 1 --warmup 1 --device cuda --bf16
# The same with attention spelled out (matmul, softmax, dropout, matmul)
# instead of the fused kernels, for the difference they make.
KILN_ATTENTION=composite stage bench_bert_base_bf16_composite 50 "$BIN/kiln" bench --model bert-base \
  --task text-classification --batch 32 --seq 128 --steps 10 --warmup 2 --device cuda --bf16
KILN_ATTENTION=composite stage bench_gpt2_bf16_composite 90 "$BIN/kiln" bench --model gpt2 --task causal-lm \
  --batch 16 --seq 1024 --steps 5 --warmup 2 --device cuda --bf16
# And without the padded copies of large products with odd extents (the LM head).
KILN_CUDA_GEMM_PAD=0 stage bench_gpt2_bf16_unpadded 90 "$BIN/kiln" bench --model gpt2 --task causal-lm \
  --batch 16 --seq 1024 --steps 5 --warmup 2 --device cuda --bf16
# Where the GPT-2 step's device time goes (CUDA events around every launch).
KILN_PROFILE=1 stage profile_gpt2 60 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 2 --warmup 1 --device cuda
KILN_PROFILE=1 stage profile_gpt2_bf16 60 "$BIN/kiln" bench --model gpt2 --task causal-lm --batch 16 --seq 1024 \
  --steps 2 --warmup 1 --device cuda --bf16
KILN_PROFILE=1 stage profile_bert_base_bf16 60 "$BIN/kiln" bench --model bert-base --task text-classification \
  --batch 32 --seq 128 --steps 2 --warmup 1 --device cuda --bf16
for p in profile_gpt2 profile_gpt2_bf16 profile_bert_base_bf16; do
  [ -f "$LOGS/$p.log" ] && sed -n '/kiln profile/,$p' "$LOGS/$p.log" | head -${PROFILE_LINES:-40} | sed "s/^/$p: /" |
    tee -a "$OUT/summary.txt"
done
for b in bench_bert_base bench_gpt2 bench_bert_base_tf32 bench_gpt2_tf32 bench_bert_base_bf16 bench_gpt2_bf16 \
    bench_bert_base_bf16_composite bench_gpt2_bf16_composite bench_gpt2_bf16_unpadded; do
  [ -f "$LOGS/$b.log" ] && grep -E "^kiln bench|median step|tokens/s|model FLOP|compile|device|fused kernels|GEMM shape" "$LOGS/$b.log" |
    sed "s/^/$b: /" | tee -a "$OUT/summary.txt"
done
if python3 -c 'import torch, transformers' 2> /dev/null; then
  modes=${TORCH_MODES:-fp32,tf32,bf16,bf16-compile}
  stage torch_gpt2 120 python3 "$ROOT/bench/gpu/torch_ref.py" --model gpt2 --batch 16 --seq 1024 --steps 5 --modes "$modes"
  stage torch_bert_base 60 python3 "$ROOT/bench/gpu/torch_ref.py" --model bert-base --batch 32 --seq 128 --modes "$modes"
  cat "$LOGS"/torch_*.log | grep '^{' | tee -a "$OUT/summary.txt"
else
  log "PyTorch with transformers is not installed here: no reference run"
fi
