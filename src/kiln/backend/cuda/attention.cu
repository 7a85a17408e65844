// Fused attention on bf16 tensor cores (the IR's Attention / AttentionGrad,
// made by ops.cpp's fused_attention under --bf16 on CUDA):
//   out = dropout(softmax(scale · q kᵀ, causal, + mask)) v
// without the [B, H, Tq, Tk] score matrix in device memory. Flash-attention's
// scheme with wmma 16x16x16 bf16 fragments and f32 sums: a block takes 64
// queries (forward) or 64 keys (backward) of one (batch, head), each of its
// four warps 16 rows; key (query) tiles of 64 stream through shared memory;
// the forward keeps the running row maximum and sum (online softmax), the
// backward recomputes the probabilities from the row log-sum-exp that a
// statistics pass wrote. Dropout draws the Philox numbers that
// dropout(probs) would draw on the materialised [B, H, Tq, Tk] tensor
// (element index first + ((b·H + h)·Tq + i)·Tk + j), so the masks equal the
// composite's, on the CPU too. Rounding follows autocast's composite: q, k,
// v, the dropped probabilities, the output gradient and the score gradient
// enter the products as bf16 (the forward rounds the probabilities before
// the division by the row sum, as online softmax must; the composite after).
// Two differences from the composite, both in rows HF gives no meaning: a
// query whose visible keys are all masked (left padding under the causal
// rule) spreads its weight over the keys up to its own tile, not over all
// keys; and dq is summed with atomics, so it is not bit-identical from run
// to run. The kernels take bf16 q, k, v of head size 16, 32 or 64 on a GPU
// of compute capability 8.0 or newer; pointers are device pointers at the
// operands' offsets: q [B,H,Tq,D], k and v [B,H,Tk,D] contiguous, mask
// [B or 1, Tk] f32 (null: none), key the dropout's i64 [3] rng key (null
// when dropout is 0). Kernel table: kernels.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "kiln/backend/attention_args.h"
#include "kiln/backend/cuda/common.h"
#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/cuda/kernels.h"
#include "kiln/backend/philox_core.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda::kernels {

namespace {

using backend::AttentionArgs;
using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;    // queries (forward) / keys (backward) per block
constexpr int kTile = 64;    // keys (forward) / queries (backward) per step
constexpr int kWarps = 4;    // 16 rows each
constexpr int kThreadsAttn = kWarps * 32;
constexpr float kFloatMin = -3.40282346638528859812e+38f;  // finfo(float32).min, HF's masked score

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// rows x D bf16 of a [T, D] matrix starting at row `row0` into shared
// memory rows of stride ld; rows at or past T are zeros. 16-byte copies when
// the source allows (D is a multiple of 16).
template <int D>
__device__ void load_rows(bf16* dst, int ld, const bf16* src, int64_t row0, int64_t T, int rows) {
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) {  // an operand at an odd offset: element by element
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x)
      dst[(e / D) * ld + e % D] = row0 + e / D < T ? src[(row0 + e / D) * D + e % D] : __float2bfloat16_rn(0.0f);
    return;
  }
  constexpr int kVec = D / 8;  // uint4 per row
  for (int v = threadIdx.x; v < rows * kVec; v += blockDim.x) {
    const int r = v / kVec, c = v % kVec;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row0 + r < T) val = reinterpret_cast<const uint4*>(src + (row0 + r) * D)[c];
    reinterpret_cast<uint4*>(dst + r * ld)[c] = val;
  }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The score of query i, key j after scaling, the causal rule and the mask
// value of key j (0 without a mask), as the composite computes it (-inf:
// past the keys' end, never a maximum).
__device__ __forceinline__ float masked_score(float s, const AttentionArgs& a, float mask_j, int64_t i, int64_t j) {
  if (j >= a.Tk) return -INFINITY;
  float x = s * a.scale;
  if (a.causal && j > i) x = kFloatMin;
  return x + mask_j;
}

// Bit c (c < N): whether element index + c of the dropout's stream is kept
// (a Philox block per 4 consecutive elements).
template <int N>
__device__ __forceinline__ uint32_t kept_run(const AttentionArgs& a, const int64_t* key, uint64_t index) {
  const uint64_t seed = static_cast<uint64_t>(key[0]), offset = static_cast<uint64_t>(key[1]);
  uint32_t bits = 0, w[4];
  uint64_t block = index >> 2;
  philox_block(seed, offset, block, w);
#pragma unroll
  for (int c = 0; c < N; ++c) {
    if (((index + c) >> 2) != block) {
      block = (index + c) >> 2;
      philox_block(seed, offset, block, w);
    }
    if (philox_to_uniform(w[(index + c) & 3]) >= a.dropout) bits |= 1u << c;
  }
  return bits;
}

// Shared-memory row strides, padded so that a warp's rows fall in different
// banks: bf16 tiles D + 8, f32 score tiles 64 + 4, bf16 probability tiles
// 64 + 8, f32 output tiles D + 4 (what wmma takes: multiples of 16 bytes).
constexpr int kLdS = kTile + 4, kLdP = kTile + 8;
template <int D>
__host__ __device__ constexpr int ld_half() { return D + 8; }
template <int D>
__host__ __device__ constexpr int ld_out() { return D + 4; }

// out (16 x 64 f32, row stride kLdS) = a (16 x D: the warp's rows, as D/16
// fragments) times the transpose of `rows` (64 x D bf16, row stride ld).
template <int D>
__device__ void product_nt(float* out, const FragA (&a)[D / 16], const bf16* rows, int ld) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragBT fb;
      wmma::load_matrix_sync(fb, rows + n * 16 * ld + kk * 16, ld);
      wmma::mma_sync(acc, a[kk], fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLdS, wmma::mem_row_major);
  }
}

// acc (16 x D, as D/16 fragments) += a (16 x 64 bf16, row stride lda) times
// b (64 x D bf16, row stride ldb).
template <int D>
__device__ void accumulate_nn(FragC (&acc)[D / 16], const bf16* a, int lda, const bf16* b, int ldb) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA fa;
      FragB fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b + kk * 16 * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
}

// Forward (kStats = false): out [B,H,Tq,D] f32. Statistics (kStats = true,
// the backward's first pass): lse [B·H·Tq] = the rows' log-sum-exp,
// delta = rowsum(dout · out), dout16 = dout rounded to bf16. A lane holds
// columns 2·lane and 2·lane + 1 of each of its warp's 16 rows.
template <int D, bool kStats>
__global__ void __launch_bounds__(kThreadsAttn) attention_forward(AttentionArgs a, const bf16* q, const bf16* k,
                                                                    const bf16* v, const float* mask,
                                                                    const int64_t* key, float* out, float* lse,
                                                                    float* delta, const float* dout, bf16* dout16) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int LDH = ld_half<D>(), LDO = ld_out<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);                  // [64][LDH]
  bf16* k_s = q_s + kRows * LDH;                               // [64][LDH]
  bf16* v_s = k_s + kTile * LDH;                               // [64][LDH]
  float* s_all = reinterpret_cast<float*>(v_s + kTile * LDH);  // [4][16][kLdS] scores
  bf16* p_all = reinterpret_cast<bf16*>(s_all + kWarps * 16 * kLdS);  // [4][16][kLdP] dropped probabilities
  float* o_all = reinterpret_cast<float*>(p_all + kWarps * 16 * kLdP);  // [4][16][LDO] unnormalised output
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* s_w = s_all + warp * 16 * kLdS;
  bf16* p_w = p_all + warp * 16 * kLdP;
  float* o_w = o_all + warp * 16 * LDO;

  const int64_t bh = blockIdx.x, b = bh / a.H;
  const int64_t q0 = static_cast<int64_t>(blockIdx.y) * kRows, i_base = q0 + warp * 16;
  const bf16* kb = k + bh * a.Tk * D;
  const bf16* vb = v + bh * a.Tk * D;
  const float* mask_b = mask ? mask + b * a.mask_batch_stride : nullptr;
  load_rows<D>(q_s, LDH, q + bh * a.Tq * D, q0, a.Tq, kRows);
  for (int e = lane; e < 16 * LDO; e += 32) o_w[e] = 0.0f;
  __syncthreads();
  FragA qa[D / 16];  // the warp's 16 queries, for every key tile
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(qa[kk], q_s + warp * 16 * LDH + kk * 16, LDH);

  float m[16], l[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  int64_t tiles = (a.Tk + kTile - 1) / kTile;
  if (a.causal) tiles = min(tiles, (q0 + kRows - 1) / kTile + 1);  // later keys are all masked
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t j0 = t * kTile, jc = j0 + 2 * lane;
    __syncthreads();  // the previous tile's k_s / v_s are read
    load_rows<D>(k_s, LDH, kb, j0, a.Tk, kTile);
    if (!kStats) load_rows<D>(v_s, LDH, vb, j0, a.Tk, kTile);
    __syncthreads();
    product_nt<D>(s_w, qa, k_s, LDH);  // s_w = q_w kᵀ: 16 x 64
    const float mask0 = mask_b && jc < a.Tk ? mask_b[jc] : 0.0f, mask1 = mask_b && jc + 1 < a.Tk ? mask_b[jc + 1] : 0.0f;
    __syncwarp();
    float alpha[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t i = i_base + r;
      const float2 sv = *reinterpret_cast<const float2*>(s_w + r * kLdS + 2 * lane);
      const float x0 = masked_score(sv.x, a, mask0, i, jc), x1 = masked_score(sv.y, a, mask1, i, jc + 1);
      const float m_new = fmaxf(m[r], warp_max(fmaxf(x0, x1)));
      alpha[r] = m[r] == -INFINITY ? 0.0f : __expf(m[r] - m_new);
      float p0 = x0 == -INFINITY ? 0.0f : __expf(x0 - m_new), p1 = x1 == -INFINITY ? 0.0f : __expf(x1 - m_new);
      l[r] = l[r] * alpha[r] + warp_sum(p0 + p1);
      m[r] = m_new;
      if constexpr (kStats) continue;
      if (a.dropout > 0.0f) {
        const uint32_t keep = kept_run<2>(a, key, static_cast<uint64_t>(key[2] + (bh * a.Tq + i) * a.Tk + jc));
        p0 = keep & 1u ? p0 * a.inv_keep : 0.0f;
        p1 = keep & 2u ? p1 * a.inv_keep : 0.0f;
      }
      *reinterpret_cast<__nv_bfloat162*>(p_w + r * kLdP + 2 * lane) = __floats2bfloat162_rn(p0, p1);
    }
    if constexpr (!kStats) {
#pragma unroll
      for (int r = 0; r < 16; ++r)
        for (int d = lane; d < D; d += 32) o_w[r * LDO + d] *= alpha[r];
      __syncwarp();
      // o_w += p_w v: 16 x D
      FragC acc[D / 16];
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::load_matrix_sync(acc[n], o_w + n * 16, LDO, wmma::mem_row_major);
      accumulate_nn<D>(acc, p_w, kLdP, v_s, LDH);
#pragma unroll
      for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(o_w + n * 16, acc[n], LDO, wmma::mem_row_major);
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < 16; ++r) {
    const int64_t i = i_base + r;  // the same on every lane
    if (i >= a.Tq) break;
    const int64_t row = bh * a.Tq + i;
    if (kStats) {
      float d = 0.0f;
      for (int c = lane; c < D; c += 32) {
        d += dout[row * D + c] * out[row * D + c];
        dout16[row * D + c] = __float2bfloat16_rn(dout[row * D + c]);
      }
      d = warp_sum(d);
      if (lane == 0) {
        lse[row] = m[r] + logf(l[r]);
        delta[row] = d;
      }
    } else {
      const float inv_l = 1.0f / l[r];
      for (int c = lane; c < D; c += 32) out[row * D + c] = o_w[r * LDO + c] * inv_l;
    }
  }
#endif
}

// Backward: one block per 64 keys of a (batch, head); dk, dv written, dq
// accumulated with atomics into the zeroed dq. A lane holds queries
// 2·lane and 2·lane + 1 of each of its warp's 16 keys.
template <int D>
__global__ void __launch_bounds__(kThreadsAttn) attention_backward(AttentionArgs a, const bf16* q, const bf16* k,
                                                                     const bf16* v, const float* mask,
                                                                     const int64_t* key, const float* lse,
                                                                     const float* delta, const bf16* dout16,
                                                                     float* dq, float* dk, float* dv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int LDH = ld_half<D>(), LDO = ld_out<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* k_s = reinterpret_cast<bf16*>(smem);   // [64 keys][LDH]
  bf16* v_s = k_s + kRows * LDH;                // [64 keys][LDH]
  bf16* q_s = v_s + kRows * LDH;                // [64 queries][LDH]
  bf16* do_s = q_s + kTile * LDH;               // [64 queries][LDH]
  bf16* ds_s = do_s + kTile * LDH;              // [64 keys][kLdP]: dSᵀ
  bf16* pt_all = ds_s + kRows * kLdP;           // [4][16][kLdP]: dropped Pᵀ
  float* st_all = reinterpret_cast<float*>(pt_all + kWarps * 16 * kLdP);  // [4][16][kLdS]: Sᵀ, then dPᵀ
  float* dq_all = st_all + kWarps * 16 * kLdS;  // [4][16][LDO]
  float* lse_s = dq_all + kWarps * 16 * LDO;    // [64]
  float* delta_s = lse_s + kTile;               // [64]
  float* mask_s = delta_s + kTile;              // [64]: the mask of the block's keys
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* pt_w = pt_all + warp * 16 * kLdP;
  float* st_w = st_all + warp * 16 * kLdS;
  float* dq_w = dq_all + warp * 16 * LDO;

  const int64_t bh = blockIdx.x, b = bh / a.H;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * kRows, j_base = j0 + warp * 16;
  const bf16* qb = q + bh * a.Tq * D;
  const bf16* dob = dout16 + bh * a.Tq * D;
  const float* mask_b = mask ? mask + b * a.mask_batch_stride : nullptr;
  load_rows<D>(k_s, LDH, k + bh * a.Tk * D, j0, a.Tk, kRows);
  load_rows<D>(v_s, LDH, v + bh * a.Tk * D, j0, a.Tk, kRows);
  for (int c = threadIdx.x; c < kRows; c += blockDim.x) mask_s[c] = mask_b && j0 + c < a.Tk ? mask_b[j0 + c] : 0.0f;
  __syncthreads();
  FragA ka[D / 16], va[D / 16];  // the warp's 16 keys and values, for every query tile
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wmma::load_matrix_sync(ka[kk], k_s + warp * 16 * LDH + kk * 16, LDH);
    wmma::load_matrix_sync(va[kk], v_s + warp * 16 * LDH + kk * 16, LDH);
  }

  FragC dk_acc[D / 16], dv_acc[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  const int64_t tiles = (a.Tq + kTile - 1) / kTile;
  const int64_t first = a.causal ? j0 / kTile : 0;  // earlier queries see none of these keys
  for (int64_t t = first; t < tiles; ++t) {
    const int64_t i0 = t * kTile, ic = i0 + 2 * lane;
    __syncthreads();  // the previous tile's q_s, do_s, ds_s are read
    load_rows<D>(q_s, LDH, qb, i0, a.Tq, kTile);
    load_rows<D>(do_s, LDH, dob, i0, a.Tq, kTile);
    for (int c = threadIdx.x; c < kTile; c += blockDim.x) {
      const bool in = i0 + c < a.Tq;
      lse_s[c] = in ? lse[bh * a.Tq + i0 + c] : INFINITY;  // queries past the end: probability 0
      delta_s[c] = in ? delta[bh * a.Tq + i0 + c] : 0.0f;
    }
    __syncthreads();
    product_nt<D>(st_w, ka, q_s, LDH);  // st_w = k_w qᵀ: 16 keys x 64 queries
    __syncwarp();
    const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + 2 * lane);
    const float2 delta2 = *reinterpret_cast<const float2*>(delta_s + 2 * lane);
    float p[16][2];
    uint32_t keep = 0xffffffffu;  // bit 2r + e: query ic + e, key j_base + r
    if (a.dropout > 0.0f) {
      // Per query, the warp's 16 keys are consecutive elements of the stream.
      const uint32_t k0 = ic < a.Tq ? kept_run<16>(a, key, static_cast<uint64_t>(key[2] + (bh * a.Tq + ic) * a.Tk + j_base)) : 0u;
      const uint32_t k1 =
          ic + 1 < a.Tq ? kept_run<16>(a, key, static_cast<uint64_t>(key[2] + (bh * a.Tq + ic + 1) * a.Tk + j_base)) : 0u;
      keep = 0;
#pragma unroll
      for (int r = 0; r < 16; ++r) keep |= (((k0 >> r) & 1u) | (((k1 >> r) & 1u) << 1)) << (2 * r);
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t j = j_base + r;
      const float2 sv = *reinterpret_cast<const float2*>(st_w + r * kLdS + 2 * lane);
      const float mj = mask_s[warp * 16 + r];
      const float x0 = masked_score(sv.x, a, mj, ic, j), x1 = masked_score(sv.y, a, mj, ic + 1, j);
      p[r][0] = x0 == -INFINITY ? 0.0f : __expf(x0 - lse2.x);
      p[r][1] = x1 == -INFINITY ? 0.0f : __expf(x1 - lse2.y);
      *reinterpret_cast<__nv_bfloat162*>(pt_w + r * kLdP + 2 * lane) =
          __floats2bfloat162_rn((keep >> (2 * r)) & 1u ? p[r][0] * a.inv_keep : 0.0f,
                                (keep >> (2 * r)) & 2u ? p[r][1] * a.inv_keep : 0.0f);
    }
    __syncwarp();
    accumulate_nn<D>(dv_acc, pt_w, kLdP, do_s, LDH);  // dv_w += pᵀ_w dout: 16 keys x D
    product_nt<D>(st_w, va, do_s, LDH);  // st_w = v_w doutᵀ (dPᵀ): 16 keys x 64 queries
    __syncwarp();
    // dS = P ∘ (dropout'(dP) − delta), times the score scale: the gradient of q kᵀ
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const float2 dp = *reinterpret_cast<const float2*>(st_w + r * kLdS + 2 * lane);
      const float d0 = (keep >> (2 * r)) & 1u ? dp.x * a.inv_keep : 0.0f;
      const float d1 = (keep >> (2 * r)) & 2u ? dp.y * a.inv_keep : 0.0f;
      *reinterpret_cast<__nv_bfloat162*>(ds_s + (warp * 16 + r) * kLdP + 2 * lane) = __floats2bfloat162_rn(
          p[r][0] * (d0 - delta2.x) * a.scale, p[r][1] * (d1 - delta2.y) * a.scale);
    }
    __syncwarp();
    accumulate_nn<D>(dk_acc, ds_s + warp * 16 * kLdP, kLdP, q_s, LDH);  // dk_w += dSᵀ_w q: 16 keys x D
    __syncthreads();  // every warp's dSᵀ rows are in ds_s
    // dq (queries 16·warp.. of the tile) += dS k: 16 queries x D, over the block's 64 keys
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kRows / 16; ++kk) {
        FragAT fa;  // dS[query, key] = ds_s[key][query]: column-major
        FragB fb;
        wmma::load_matrix_sync(fa, ds_s + kk * 16 * kLdP + warp * 16, kLdP);
        wmma::load_matrix_sync(fb, k_s + kk * 16 * LDH + n * 16, LDH);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(dq_w + n * 16, acc, LDO, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t iq = i0 + warp * 16 + r;
      if (iq >= a.Tq) break;
      for (int d = lane; d < D; d += 32) atomicAdd(dq + (bh * a.Tq + iq) * D + d, dq_w[r * LDO + d]);
    }
  }
  // dk, dv of the warp's 16 keys, through shared memory (st_w: 16 x kLdS >= 16 x LDO floats).
  __syncwarp();
#pragma unroll
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(st_w + n * 16, which ? dv_acc[n] : dk_acc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    float* dst = which ? dv : dk;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int64_t j = j_base + r;
      if (j >= a.Tk) break;
      for (int d = lane; d < D; d += 32) dst[(bh * a.Tk + j) * D + d] = st_w[r * LDO + d];
    }
    __syncwarp();
  }
#endif
}

// Blocks: (batch·heads, 64-row tiles of the T queries or keys).
dim3 grid(const AttentionArgs& a, int64_t T) {
  return dim3(static_cast<unsigned>(a.B * a.H), static_cast<unsigned>((T + kRows - 1) / kRows));
}
void check_grid(const AttentionArgs& a) {
  KILN_CHECK(a.B * a.H < (int64_t{1} << 31) && a.Tq < int64_t{65535} * kRows && a.Tk < int64_t{65535} * kRows,
             "cuda attention: ", a.B, " x ", a.H, " heads of ", a.Tq, " queries and ", a.Tk, " keys exceed the grid");
}

template <int D>
size_t forward_smem() {
  return (kRows + 2 * kTile) * ld_half<D>() * sizeof(bf16) + kWarps * 16 * kLdS * sizeof(float) +
         kWarps * 16 * kLdP * sizeof(bf16) + kWarps * 16 * ld_out<D>() * sizeof(float);
}
template <int D>
size_t backward_smem() {
  return (2 * kRows + 2 * kTile) * ld_half<D>() * sizeof(bf16) + (kRows + kWarps * 16) * kLdP * sizeof(bf16) +
         kWarps * 16 * (kLdS + ld_out<D>()) * sizeof(float) + 3 * kTile * sizeof(float);
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int D>
void forward_d(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
               const int64_t* key, float* out, cudaStream_t s) {
  const size_t bytes = forward_smem<D>();
  allow_smem(attention_forward<D, false>, bytes);
  attention_forward<D, false><<<grid(a, a.Tq), kThreadsAttn, bytes, s>>>(
      a, static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), mask, key, out,
      nullptr, nullptr, nullptr, nullptr);
}

template <int D>
void backward_d(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
                const int64_t* key, const float* out, const float* dout, float* dq, float* dk, float* dv,
                void* scratch, cudaStream_t s) {
  const size_t rows = static_cast<size_t>(a.B * a.H * a.Tq);
  float* lse = static_cast<float*>(scratch);
  float* delta = reinterpret_cast<float*>(static_cast<char*>(scratch) + aligned256(rows * sizeof(float)));
  bf16* dout16 = reinterpret_cast<bf16*>(static_cast<char*>(scratch) + 2 * aligned256(rows * sizeof(float)));
  const size_t fbytes = forward_smem<D>(), bbytes = backward_smem<D>();
  allow_smem(attention_forward<D, true>, fbytes);
  allow_smem(attention_backward<D>, bbytes);
  const auto* q16 = static_cast<const bf16*>(q);
  const auto* k16 = static_cast<const bf16*>(k);
  const auto* v16 = static_cast<const bf16*>(v);
  attention_forward<D, true><<<grid(a, a.Tq), kThreadsAttn, fbytes, s>>>(a, q16, k16, v16, mask, key, const_cast<float*>(out),
                                                                  lse, delta, dout, dout16);
  KILN_CUDA_CHECK(cudaMemsetAsync(dq, 0, a.B * a.H * a.Tq * D * sizeof(float), s));
  attention_backward<D><<<grid(a, a.Tk), kThreadsAttn, bbytes, s>>>(a, q16, k16, v16, mask, key, lse, delta, dout16, dq, dk,
                                                            dv);
}

// AttentionGrad's scratch: the rows' log-sum-exp and delta, dout in bf16.
size_t attention_scratch_bytes(const AttentionArgs& a) {
  const size_t rows = static_cast<size_t>(a.B * a.H * a.Tq);
  return 2 * aligned256(rows * sizeof(float)) + rows * static_cast<size_t>(a.D) * sizeof(uint16_t);
}

// out [B,H,Tq,D] f32.
void attention(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
               const int64_t* key, float* out, cudaStream_t s) {
  if (a.B * a.H * a.Tq == 0) return;
  check_grid(a);
  if (a.Tk == 0) {  // no keys: a sum of nothing
    KILN_CUDA_CHECK(cudaMemsetAsync(out, 0, a.B * a.H * a.Tq * a.D * sizeof(float), s));
    return;
  }
  switch (a.D) {
    case 16: return forward_d<16>(a, q, k, v, mask, key, out, s);
    case 32: return forward_d<32>(a, q, k, v, mask, key, out, s);
    case 64: return forward_d<64>(a, q, k, v, mask, key, out, s);
    default: throw Error(detail::concat("cuda attention: head size ", a.D, " (16, 32 or 64 supported)"));
  }
}

// dq [B,H,Tq,D], dk and dv [B,H,Tk,D] f32, from the forward's out and its
// gradient dout (f32). scratch: attention_scratch_bytes(a).
void attention_grad(const AttentionArgs& a, const void* q, const void* k, const void* v, const float* mask,
                    const int64_t* key, const float* out, const float* dout, float* dq, float* dk, float* dv,
                    void* scratch, cudaStream_t s) {
  if (a.B * a.H == 0) return;
  check_grid(a);
  if (a.Tq == 0 || a.Tk == 0) {  // nothing attends: zero gradients
    KILN_CUDA_CHECK(cudaMemsetAsync(dk, 0, a.B * a.H * a.Tk * a.D * sizeof(float), s));
    KILN_CUDA_CHECK(cudaMemsetAsync(dv, 0, a.B * a.H * a.Tk * a.D * sizeof(float), s));
    KILN_CUDA_CHECK(cudaMemsetAsync(dq, 0, a.B * a.H * a.Tq * a.D * sizeof(float), s));
    return;
  }
  switch (a.D) {
    case 16: return backward_d<16>(a, q, k, v, mask, key, out, dout, dq, dk, dv, scratch, s);
    case 32: return backward_d<32>(a, q, k, v, mask, key, out, dout, dq, dk, dv, scratch, s);
    case 64: return backward_d<64>(a, q, k, v, mask, key, out, dout, dq, dk, dv, scratch, s);
    default: throw Error(detail::concat("cuda attention: head size ", a.D, " (16, 32 or 64 supported)"));
  }
}

}  // namespace

}  // namespace kiln::backend::cuda::kernels

namespace kiln::backend::cuda {

using compiler::Instr;
using ir::Op;

namespace {

void prepare_attention(const Instr& ins, const DeviceState& ds, KernelStep& st) {
  KILN_CHECK(ins.inputs[0].dtype == DType::bf16, "cuda backend: fused attention needs bf16 q, k and v ",
             "(--bf16 / kiln::Autocast); got ", dtype_name(ins.inputs[0].dtype),
             " (KILN_ATTENTION=auto uses the composite in fp32)");
  require_bf16_tensor_cores(ds, "cuda backend: fused attention needs");
  KILN_CHECK(!ir::AttentionAttrs::of(ins.attrs).kept_probs, "the CUDA attention kernels recompute the probabilities "
             "(compile without CompileOptions::attention_probabilities)");
  KILN_CHECK(!ir::AttentionAttrs::of(ins.attrs).has_segments, "cuda backend: fused attention takes no segment ids "
             "(packed rows) yet; the models take the composite with a block-diagonal mask on CUDA");
  if (ins.op == Op::AttentionGrad) st.scratch_bytes = kernels::attention_scratch_bytes(attention_args(ins));
}

void run_attention(const KernelCall& k) {
  const Instr& ins = k.ins;
  const AttentionArgs a = attention_args(ins);
  KILN_CHECK(a.window == 0, "cuda backend: fused attention has no sliding window yet (the model takes the composite)");
  const float* mask = a.mask_input >= 0 ? k.f(a.mask_input) : nullptr;
  const int64_t* key = a.key_input >= 0 ? reinterpret_cast<const int64_t*>(k.inp(a.key_input)) : nullptr;
  if (ins.op == Op::Attention)
    return kernels::attention(a, k.inp(0), k.inp(1), k.inp(2), mask, key, k.fo(), k.stream());
  const size_t next = ins.inputs.size() - 2;  // AttentionGrad: then out, dout
  float* dq = k.fo();
  float* dk = dq + a.B * a.H * a.Tq * a.D;
  float* dv = dk + a.B * a.H * a.Tk * a.D;
  return kernels::attention_grad(a, k.inp(0), k.inp(1), k.inp(2), mask, key, k.f(next), k.f(next + 1), dq, dk, dv,
                                 k.scratch(), k.stream());
}

}  // namespace

void add_attention_kernels(KernelTable& t) {
  add_kernel(t, Op::Attention, {.run = run_attention, .prepare = prepare_attention});
  add_kernel(t, Op::AttentionGrad, {.run = run_attention, .prepare = prepare_attention});
}

}  // namespace kiln::backend::cuda
