#pragma once
// Fused attention kernels (attention.cu) for the IR's Attention and
// AttentionGrad with bf16 q, k, v of head size 16, 32 or 64 on a GPU of
// compute capability 8.0 or newer. Pointers are device pointers at the
// operands' offsets; q [B,H,Tq,D], k and v [B,H,Tk,D] contiguous; mask
// [B or 1, Tk] f32 (null: none); key the dropout's i64 [3] rng key (null
// when dropout is 0).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/backend/attention_args.h"

namespace kiln::backend::cuda::kernels {

using backend::AttentionArgs;

// out [B,H,Tq,D] f32.
void attention(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
               const int64_t* key, float* out, cudaStream_t stream);
// dq [B,H,Tq,D], dk and dv [B,H,Tk,D] f32, from the forward's out and its
// gradient dout (f32). scratch: attention_scratch_bytes(a).
void attention_grad(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
                    const int64_t* key, const float* out, const float* dout, float* dq, float* dk, float* dv,
                    void* scratch, cudaStream_t stream);
size_t attention_scratch_bytes(const AttentionArgs& a);

}  // namespace kiln::backend::cuda::kernels
