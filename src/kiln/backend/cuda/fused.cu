// The fused elementwise interpreter on the device: one thread per element
// runs the instruction's FusedStep program (fused_eval.h, shared with the
// host tests) over registers in local memory. The program and its views are
// copied to shared memory by each block first. Correct first: a later
// version may compile each program with NVRTC instead.
#include <cuda_runtime.h>

#include <algorithm>

#include "kiln/backend/cuda/fused_eval.h"
#include "kiln/backend/cuda/kernels.h"

namespace kiln::backend::cuda::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T, int kRegs>
__global__ void __launch_bounds__(kThreads) fused_kernel(const FusedDesc* desc, char* const* slots, bool in_shared) {
  extern __shared__ int64_t shared_words[];
  const FusedDesc* d = desc;
  if (in_shared) {
    const int64_t words = desc->bytes / 8;
    const int64_t* src = reinterpret_cast<const int64_t*>(desc);
    for (int64_t w = threadIdx.x; w < words; w += blockDim.x) shared_words[w] = src[w];
    __syncthreads();
    d = reinterpret_cast<const FusedDesc*>(shared_words);
  }
  const FStep* steps = desc_array<FStep>(d, d->steps_at);
  const ViewDesc* inputs = desc_array<ViewDesc>(d, d->inputs_at);
  T regs[kRegs];
  for (int r = 0; r < kRegs; ++r) regs[r] = T(0);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d->n; i += int64_t(gridDim.x) * blockDim.x) {
    fused_eval<T>(steps, d->nsteps, inputs, slots, i, regs);
    fused_store<T>(d, slots, i, regs);
  }
}

template <typename T, int kRegs>
void launch(const FusedDesc* desc, const FusedDesc& host, char* const* slots, int sms, cudaStream_t stream) {
  constexpr int kMaxShared = 48 * 1024;
  const bool in_shared = host.bytes <= kMaxShared;
  int64_t blocks = (host.n + kThreads - 1) / kThreads;
  blocks = std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t(sms) * 16));
  fused_kernel<T, kRegs><<<static_cast<unsigned>(blocks), kThreads, in_shared ? host.bytes : 0, stream>>>(
      desc, slots, in_shared);
}

}  // namespace

void fused(const FusedDesc* desc, const FusedDesc& host, char* const* slots, int sms, cudaStream_t stream) {
  if (host.n == 0) return;
  // Two register-file sizes: most programs need a handful of live values.
  if (host.wide) {
    if (host.nregs <= kFusedSmallRegs) launch<double, kFusedSmallRegs>(desc, host, slots, sms, stream);
    else launch<double, kFusedMaxRegs>(desc, host, slots, sms, stream);
  } else {
    if (host.nregs <= kFusedSmallRegs) launch<float, kFusedSmallRegs>(desc, host, slots, sms, stream);
    else launch<float, kFusedMaxRegs>(desc, host, slots, sms, stream);
  }
}

}  // namespace kiln::backend::cuda::kernels
