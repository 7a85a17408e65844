#include <gtest/gtest.h>

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
}

}  // namespace
}  // namespace kiln
