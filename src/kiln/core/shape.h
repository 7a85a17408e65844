#pragma once
// Shapes are row-major extents. A scalar has shape [].
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string to_string(const Shape& s);  // "[8,128]"
// Row-major (contiguous) strides of s, in elements.
std::vector<int64_t> contiguous_strides(const Shape& s);
// Wraps a possibly negative axis into [0, rank); throws naming `op` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// A shape seen as (outer, axis, inner) around its axes [a0, a1]: how the
// backends' row-wise kernels (reductions, softmax, concat) walk it.
struct AxisSplit {
  int64_t outer = 1, axis = 1, inner = 1;
};
AxisSplit split_axes(const Shape& s, int64_t a0, int64_t a1);

}  // namespace kiln
