#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "kiln/core/bf16.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln {
namespace {

TEST(Core, DevicesParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu(0));
  EXPECT_EQ(Device::parse("cpu:3"), Device::cpu(3));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_THROW(Device::parse("tpu:0"), Error);
  EXPECT_THROW(Device::parse("cpu:x"), Error);
}

TEST(Core, ShapesBroadcastOrSayWhyNot) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "add"), (Shape{2, 3, 4}));
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  try {
    broadcast_shapes({2, 3}, {4}, "mul");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "mul: shapes [2,3] and [4] cannot be broadcast together");
  }
  EXPECT_EQ(normalize_axis(-1, 3, "sum"), 2);
  EXPECT_THROW(normalize_axis(3, 3, "sum"), Error);
}

TEST(Core, DTypes) {
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(parse_dtype("bool"), DType::b8);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_THROW(parse_dtype("complex64"), Error);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
}

// bf16 keeps f32's exponent and 7 mantissa bits: one ulp at 1 is 2^-7, and
// halfway cases round to the even neighbour (torch's .to(torch.bfloat16)).
TEST(Core, Bf16RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2), 1.0f);                                  // tie: to even (1.0)
  EXPECT_EQ(round_to_bf16(1.0f + 1.5f * ulp), 1.0f + 2 * ulp);                     // tie: to even (1 + 2 ulp)
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 1.0f + ulp);    // past the tie: up
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 1.0f);          // below it: down
  EXPECT_EQ(round_to_bf16(-3.0f - 1.5f * 2 * ulp), -(3.0f + 2 * 2 * ulp));         // sign-symmetric
  EXPECT_EQ(round_to_bf16(0.1f), 0.10009765625f);
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.0f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_to_bf16(inf), inf);
  EXPECT_EQ(round_to_bf16(-inf), -inf);
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), inf);  // beyond bf16's largest finite value
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(std::bit_cast<float>(0x7f800001u)))));  // signalling NaN
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(round_to_bf16(tiny), 0.0f);
  EXPECT_EQ(round_to_bf16(std::ldexp(1.0f, -130)), std::ldexp(1.0f, -130));  // bf16 subnormals are kept
}

}  // namespace
}  // namespace kiln
