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

namespace kiln::backend::cuda::kernels {

struct AttentionArgs {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0;
  int D = 0;
  bool causal = false;
  float scale = 1.0f, dropout = 0.0f;
  float inv_keep = 1.0f;          // 1 / (1 - dropout), rounded from double as dropout() does

  int64_t mask_batch_stride = 0;  // Tk when the mask has one row per batch entry, else 0
};

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
