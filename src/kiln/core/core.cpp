#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "kiln/core/buffer.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/host_memory.h"
#include "kiln/core/shape.h"

namespace kiln {

std::string excerpt(std::string_view text, size_t max) {
  std::string out;
  size_t i = 0;
  while (i < text.size() && out.size() < max) {
    const auto b = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting here, or 0.
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len > 1) {
      if (i + len > text.size()) len = 0;
      for (size_t k = 1; k < len; ++k)
        if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) len = 0;
    }
    if (len == 0 || (len == 1 && (b < 0x20 || b == 0x7F))) {  // messages stay one line
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  if (i < text.size()) out += "…";
  return out;
}


DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "float32" || name == "float") return DType::f32;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "int64" || name == "long") return DType::i64;
  if (name == "bool" || name == "b8") return DType::b8;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  throw Error("unknown dtype '" + name + "' (expected f32, bf16, i32, i64 or bool)");
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  KILN_CHECK(a >= 0 && a < rank, op, ": axis ", axis, " out of range for rank ", rank);
  return a;
}

AxisSplit split_axes(const Shape& s, int64_t a0, int64_t a1) {
  AxisSplit r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < a0) r.outer *= s[d];
    else if (d <= a1) r.axis *= s[d];
    else r.inner *= s[d];
  }
  return r;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", to_string(a), " and ",
               to_string(b), " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Device Device::parse(const std::string& text) {
  std::string kind = text, idx;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    idx = text.substr(colon + 1);
  }
  Device d;
  if (kind == "cpu") d.kind = DeviceKind::CPU;
  else if (kind == "cuda") d.kind = DeviceKind::CUDA;
  else throw Error("unknown device '" + text + "' (expected cpu, cpu:N, cuda or cuda:N)");
  if (!idx.empty()) {
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    KILN_CHECK(*end == 0 && v >= 0 && v < 1024, "device '", text, "': bad index '", idx, "'");
    d.index = static_cast<int>(v);
  }
  return d;
}

std::string Device::str() const {
  return std::string(kind == DeviceKind::CPU ? "cpu" : "cuda") + ":" + std::to_string(index);
}

void Event::signal(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

void Event::wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
}

bool Event::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

namespace {
const DeviceMemoryHooks* g_cuda_memory = nullptr;

const DeviceMemoryHooks& device_memory(Device device) {
  KILN_ASSERT(device.kind == DeviceKind::CUDA);
  KILN_CHECK(g_cuda_memory != nullptr, "device ", device.str(),
             " is not available: this build has no CUDA backend (configure with -DKILN_CUDA=ON on a machine "
             "with the CUDA toolkit)");
  return *g_cuda_memory;
}
}  // namespace

void register_device_memory(DeviceKind kind, const DeviceMemoryHooks* hooks) {
  KILN_ASSERT(kind == DeviceKind::CUDA);
  g_cuda_memory = hooks;
}

Storage::Storage(Device device, size_t nbytes) : device_(device), nbytes_(nbytes) {
  if (device.kind != DeviceKind::CPU) {
    ptr_ = device_memory(device).allocate(device, nbytes);
    return;
  }
  ptr_ = host_memory::allocate(nbytes);
}

Storage::Storage(Device device, void* borrowed, size_t nbytes, std::shared_ptr<const void> keeper)
    : device_(device), nbytes_(nbytes), ptr_(borrowed), keeper_(std::move(keeper)) {
  KILN_ASSERT(keeper_ != nullptr);
}

Storage::~Storage() {
  if (keeper_) return;
  if (device_.kind == DeviceKind::CPU) host_memory::release(ptr_, nbytes_);
  else g_cuda_memory->release(device_, ptr_, nbytes_);
}

void Storage::copy_from_host(const void* src, size_t nbytes, size_t offset) {
  KILN_CHECK(offset + nbytes <= nbytes_, "copy to ", device_.str(), ": ", nbytes, " bytes at offset ", offset,
             " overrun a storage of ", nbytes_, " bytes");
  if (nbytes == 0) return;
  char* dst = static_cast<char*>(ptr_) + offset;
  if (on_host()) std::memcpy(dst, src, nbytes);
  else device_memory(device_).to_device(device_, dst, src, nbytes);
}

void Storage::copy_to_host(void* dst, size_t nbytes, size_t offset) const {
  KILN_CHECK(offset + nbytes <= nbytes_, "copy from ", device_.str(), ": ", nbytes, " bytes at offset ", offset,
             " overrun a storage of ", nbytes_, " bytes");
  if (nbytes == 0) return;
  const char* src = static_cast<const char*>(ptr_) + offset;
  if (on_host()) std::memcpy(dst, src, nbytes);
  else device_memory(device_).to_host(device_, dst, src, nbytes);
}

void Buffer::wait() const {
  if (!ready) return;
  ready->wait();
  if (!ready->error().empty())
    throw Error("tensor comes from a failed step: " + ready->error());
}

}  // namespace kiln
