#pragma once
// What the CUDA kernels read about their operands, shared by the kernels
// (nvcc) and host code (the executor, the tests): plain structs and
// __host__ __device__ index math, no CUDA headers.
#include <cstdint>

#include "kiln/core/bf16.h"
#include "kiln/core/hd.h"

namespace kiln::backend::cuda {

constexpr int kMaxRank = 8;

// Element type codes (kiln::DType's values).
enum : uint8_t { kF32 = 0, kI32 = 1, kI64 = 2, kB8 = 3, kBF16 = 4 };

KILN_HD inline int elem_size(uint8_t dtype) {
  return dtype == kB8 ? 1 : dtype == kBF16 ? 2 : dtype == kI64 ? 8 : 4;
}

// A strided view of a slot (compiler::View), in elements.
struct ViewDesc {
  int64_t offset = 0;
  int64_t numel = 1;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int32_t rank = 0;
  int32_t slot = -1;
  uint8_t dtype = kF32;
  uint8_t layout = 0;  // kGeneral, kContiguous, kScalar (every stride 0)
  uint8_t narrow = 0;  // numel < 2^31: element indices divide in 32 bits
};
enum : uint8_t { kGeneral = 0, kContiguous = 1, kScalar = 2 };

// Element offset (from the slot's start) of the view's row-major element i.
KILN_HD inline int64_t view_offset(const ViewDesc& v, int64_t i) {
  if (v.layout == kContiguous) return v.offset + i;
  if (v.layout == kScalar) return v.offset;
  int64_t off = v.offset;
  if (v.narrow) {  // 32-bit division is several times cheaper on the device
    uint32_t j = static_cast<uint32_t>(i);
    for (int d = v.rank - 1; d > 0; --d) {
      const uint32_t extent = static_cast<uint32_t>(v.shape[d]);
      const uint32_t q = j / extent;
      off += static_cast<int64_t>(j - q * extent) * v.strides[d];
      j = q;
    }
    return v.rank > 0 ? off + static_cast<int64_t>(j) * v.strides[0] : off;
  }
  for (int d = v.rank - 1; d > 0; --d) {
    const int64_t extent = v.shape[d];
    const int64_t q = i / extent;
    off += (i - q * extent) * v.strides[d];
    i = q;
  }
  return v.rank > 0 ? off + i * v.strides[0] : off;
}

// Loads element `off` of a typed slot as T.
template <typename T>
KILN_HD inline T load_as(const void* base, uint8_t dtype, int64_t off) {
  switch (dtype) {
    case kF32: return static_cast<T>(static_cast<const float*>(base)[off]);
    case kI32: return static_cast<T>(static_cast<const int32_t*>(base)[off]);
    case kI64: return static_cast<T>(static_cast<const int64_t*>(base)[off]);
    case kBF16: return static_cast<T>(bf16_to_float(static_cast<const uint16_t*>(base)[off]));
    default: return static_cast<T>(static_cast<const uint8_t*>(base)[off]);
  }
}

// Stores v converted to dtype (bool: v != 0; bf16: rounded to nearest even),
// as the CPU interpreter does.
template <typename T>
KILN_HD inline void store_as(void* base, uint8_t dtype, int64_t off, T v) {
  switch (dtype) {
    case kF32: static_cast<float*>(base)[off] = static_cast<float>(v); break;
    case kI32: static_cast<int32_t*>(base)[off] = static_cast<int32_t>(v); break;
    case kI64: static_cast<int64_t*>(base)[off] = static_cast<int64_t>(v); break;
    case kBF16: static_cast<uint16_t*>(base)[off] = bf16_from_float(static_cast<float>(v)); break;
    default: static_cast<uint8_t*>(base)[off] = v != T(0); break;
  }
}

// (outer, axis, inner) around axes [a0, a1] of a shape (kernels.cpp's Split).
struct Split {
  int64_t outer = 1, axis = 1, inner = 1;
};

// Reductions whose outputs alone would give the device too few blocks (a
// full sum: one) split the axis into parts: each block reduces one part of
// one output into scratch (a double per part and output), and a second
// kernel combines the parts in order. The split is a function of the shape
// alone, so results do not depend on the GPU. Blocks: one per output, or per
// 32 outputs when inner >= 32 (kernels_reduce.cu).
KILN_HD inline int64_t reduce_parts(Split p) {
  constexpr int64_t kTargetBlocks = 512, kMinPart = 1024;
  const int64_t blocks = p.inner >= 32 ? p.outer * ((p.inner + 31) / 32) : p.outer * p.inner;
  if (blocks >= kTargetBlocks || p.axis < 2 * kMinPart) return 1;
  const int64_t by_blocks = (kTargetBlocks + blocks - 1) / blocks, by_size = p.axis / kMinPart;
  return by_blocks < by_size ? by_blocks : by_size;
}
// Scratch buffers are carved at 256-byte boundaries (cuBLAS's and CUB's
// alignment, and every vector load's).
KILN_HD inline uint64_t aligned256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

KILN_HD inline int64_t reduce_scratch_bytes(Split p) {
  const int64_t parts = reduce_parts(p);
  return parts > 1 ? parts * p.outer * p.inner * 8 : 0;
}

// Register files of the fused kernel: programs with at most kFusedSmallRegs
// live values use the small one; more than kFusedMaxRegs is not supported.
constexpr int kFusedSmallRegs = 16;
constexpr int kFusedMaxRegs = 96;

// One step of a fused program on physical registers (compiler::FusedStep
// after register allocation).
struct FStep {
  uint8_t op = 0;     // ir::Op
  uint8_t dtype = 0;  // the step's DType
  uint8_t dst = 0;    // physical registers
  uint8_t a = 0, b = 0, c = 0;
  int16_t load = -1;  // Data / Rand*: input operand
  int32_t iattr = 0;  // Gelu/GeluGrad: ints[0]
  double value = 0;   // Constant: floats[0]
};

// A fused instruction as the kernel reads it: followed in memory by its
// steps, input views, output views and output registers (offsets in bytes
// from the descriptor's start, each 8-byte aligned).
struct FusedDesc {
  int64_t n = 0;           // elements (of every output)
  int32_t nsteps = 0, ninputs = 0, nouts = 0, nregs = 0;
  int32_t steps_at = 0, inputs_at = 0, outs_at = 0, out_regs_at = 0;
  int32_t bytes = 0;       // the whole record
  int32_t wide = 0;        // evaluate in double (integer values present)
};

template <typename T>
KILN_HD inline const T* desc_array(const FusedDesc* d, int32_t at) {
  return reinterpret_cast<const T*>(reinterpret_cast<const char*>(d) + at);
}

}  // namespace kiln::backend::cuda
