// The CUDA backend's kernel table (backend/cuda/kernels.h) against the
// CPU's: an op with a kernel of its own runs on both backends. The tables
// are function pointers filled by the family files, so this runs without a
// GPU (in any build with the CUDA toolkit).
#include <gtest/gtest.h>

#include <set>

#include "kiln/backend/cpu/executor.h"
#include "kiln/ir/op.h"

#ifdef KILN_HAVE_CUDA
#include "kiln/backend/cuda/cuda.h"
#endif

namespace kiln {
namespace {

#ifdef KILN_HAVE_CUDA

using ir::Op;

// Ops the CPU backend has a kernel for and the CUDA backend has not yet
// (docs/cuda.md, "Not built yet"); empty today.
const std::set<Op> kCpuOnly = {};

TEST(CudaKernelTable, EveryOpWithACpuKernelHasACudaKernel) {
  int kernels = 0;
  for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) {
    const Op op = static_cast<Op>(i);
    const bool cpu = backend::cpu::has_kernel(op), cuda = backend::cuda::has_kernel(op);
    kernels += cuda;
    if (kCpuOnly.count(op)) {
      EXPECT_TRUE(cpu && !cuda) << ir::op_name(op) << " is listed as CPU-only: remove it from kCpuOnly";
      continue;
    }
    EXPECT_EQ(cuda, cpu) << ir::op_name(op) << ": " << (cpu ? "a CPU kernel but no CUDA kernel (add it to its "
                                                              "family's kernels_<family>.cu)"
                                                            : "a CUDA kernel but no CPU kernel");
  }
  // The ops with kernels of their own: reductions, indexing, products, rows, attention.
  EXPECT_GE(kernels, 20);
  EXPECT_TRUE(backend::cuda::has_kernel(Op::Rope));
  EXPECT_TRUE(backend::cuda::has_kernel(Op::MatMul));
  // Elementwise ops run fused, views need no kernel, the executor runs the collectives.
  EXPECT_FALSE(backend::cuda::has_kernel(Op::Add));
  EXPECT_FALSE(backend::cuda::has_kernel(Op::AllReduce));
}

#else

TEST(CudaKernelTable, EveryOpWithACpuKernelHasACudaKernel) { GTEST_SKIP() << "built without the CUDA backend"; }

#endif  // KILN_HAVE_CUDA

}  // namespace
}  // namespace kiln
