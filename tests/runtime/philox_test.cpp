// Philox4x32-10: the known answers of Random123, and the vectorised range
// generators against the one-element definition.
#include <gtest/gtest.h>

#include <vector>

#include "kiln/backend/cpu/philox.h"

namespace kiln::backend::cpu {
namespace {

TEST(Philox, KnownAnswers) {
  // Random123's kat_vectors: philox4x32 10 rounds, counter 0 / key 0 and all-ones.
  uint32_t w[4];
  Philox::generate(0, 0, 0, w);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  Philox::generate(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull, w);
  EXPECT_EQ(w[0], 0x408f276du);
  EXPECT_EQ(w[1], 0x41c83b0eu);
  EXPECT_EQ(w[2], 0xa20bc7c6u);
  EXPECT_EQ(w[3], 0x6d5451fdu);
}

TEST(Philox, RangesEqualElementByElement) {
  // Unaligned starts, short and long runs, and a block counter whose low word wraps.
  const uint64_t wrap = 4 * ((uint64_t{1} << 32) - 5) - 3;
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{6}, uint64_t{1000003}, wrap})
    for (int64_t n : {1, 3, 9, 31, 32, 33, 48, 63, 64, 65, 80, 127, 129, 517}) {
      std::vector<float> u(n), z(n);
      Philox::uniform_range(7, 3, first, n, u.data());
      Philox::normal_range(7, 3, first, n, z.data());
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(u[j], Philox::uniform(7, 3, first + j)) << "first " << first << " j " << j;
        ASSERT_EQ(z[j], Philox::normal(7, 3, first + j)) << "first " << first << " j " << j;
      }
    }
}

}  // namespace
}  // namespace kiln::backend::cpu
