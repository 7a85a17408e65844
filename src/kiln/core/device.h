#pragma once
// A device id: "cpu:0", "cpu:1" (logical CPU devices for replicas), "cuda:0".
#include <compare>
#include <string>

namespace kiln {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::CPU, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }
  // "cpu", "cpu:1", "cuda", "cuda:0"; throws kiln::Error on anything else.
  static Device parse(const std::string& text);
  std::string str() const;

  auto operator<=>(const Device&) const = default;
};

}  // namespace kiln
