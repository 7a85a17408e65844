#pragma once
// Element types. f32 is the compute type; i32/i64 carry ids and labels; b8
// (bool, one byte) carries masks. bf16 (bfloat16: f32's sign, exponent and
// top 7 mantissa bits) is a storage type: casts produce it (rounding to
// nearest even), matrix products read it (products exact, sums in f32), and
// arithmetic on it promotes to f32 (--bf16, runtime/autocast.h).
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class DType : uint8_t { f32, i32, i64, b8, bf16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::b8: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::b8: return "bool";
    case DType::bf16: return "bf16";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16; }
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }

// Parses "f32", "float32", "bf16", "bfloat16", "i64", "int64", "bool" ...; throws kiln::Error.
DType parse_dtype(const std::string& name);

}  // namespace kiln
