#include "kiln/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/core/buffer.h"
#include "kiln/core/bf16.h"
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/atomic_file.h"
#include "kiln/io/json_file.h"
#include "kiln/runtime/context.h"
#include "kiln/runtime/tensor_impl.h"

namespace kiln::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; a big-endian host needs byte swapping here");

namespace {

using ojson = nlohmann::ordered_json;  // keeps the header's tensor order

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Element sizes of the dtypes a header may declare. Those kiln cannot load
// (U64, F8_*) still validate, so one such tensor does not make the rest of a
// checkpoint unreadable; load() names them.
size_t file_dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},     {"I16", 2}, {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1},   {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return 0;
}

const char* file_dtype_of(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::b8: return "BOOL";
    case DType::bf16: return "BF16";
  }
  return "?";
}

// A value for an error message: never recursive (a hostile header may nest
// arrays a million deep) and never long.
std::string brief(const ojson& j) {
  if (j.is_primitive()) {
    std::string s = j.dump();
    return s.size() > 40 ? s.substr(0, 40) + "..." : s;
  }
  if (j.is_array() && j.size() <= 4 && std::all_of(j.begin(), j.end(), [](const ojson& e) { return e.is_primitive(); })) {
    std::string s = "[";
    for (const auto& e : j) s += (s.size() > 1 ? "," : "") + brief(e);
    return s + "]";
  }
  return j.type_name();
}

std::string json_type(const ojson& j) {
  if (j.is_number_unsigned() || j.is_number_integer()) return "integer " + j.dump();
  if (j.is_number_float()) return "number " + j.dump();
  if (j.is_string()) return "string " + brief(j);
  return j.type_name();
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))            // inf / nan (payload kept)
                                 : (sign | ((exponent + 112) << 23) | (mantissa << 13));  // rebias 15 -> 127
  return std::bit_cast<float>(bits);
}

template <typename T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// src: n elements of Src (possibly unaligned) -> dst: n elements of Dst.
template <typename Src, typename Dst, typename Convert>
void convert(const unsigned char* src, Dst* dst, int64_t n, Convert f) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f(read_le<Src>(src + i * sizeof(Src)));
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t s) : addr(a), size(s) {}
  ~Mapping() { ::munmap(addr, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(addr); }
};

SafetensorsHeader parse_safetensors_header(std::span<const unsigned char> bytes, const std::string& file) {
  const uint64_t file_size = bytes.size();
  KILN_CHECK(file_size >= 8, file, ": truncated safetensors file: ", file_size,
             " bytes, shorter than the 8-byte header length");
  const unsigned char* base = bytes.data();
  SafetensorsHeader h;
  const uint64_t header_len = read_le<uint64_t>(base);
  KILN_CHECK(header_len <= file_size - 8, file, ": header length ", header_len, " is larger than the file (",
             file_size, " bytes, at most ", file_size - 8, " bytes of header possible): truncated or not safetensors");
  h.data_start = 8 + header_len;
  const uint64_t data_size = file_size - h.data_start;

  // Duplicate keys would silently collapse into one; catch them while parsing.
  // A valid header nests three levels ({tensor: {shape: [...]}}); deeper
  // containers are parsed but kept out of the DOM, since copying or printing
  // a million-deep value recurses off the stack.
  using Event = nlohmann::json::parse_event_t;
  constexpr int kMaxDepth = 8;
  std::string duplicate;
  bool too_deep = false;
  std::set<std::string> seen;
  ojson::parser_callback_t on_event = [&](int depth, Event event, ojson& parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxDepth) {
      too_deep = true;
      return false;
    }
    if (depth == 1 && event == Event::key && parsed.is_string() && duplicate.empty() &&
        !seen.insert(parsed.get_ref<const std::string&>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  ojson header;
  try {
    header = ojson::parse(header_begin, header_begin + header_len, on_event);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(detail::concat(file, ": header is not valid JSON (at ",
                               json_error_position({header_begin, header_len}, e.byte),
                               " of the header): ", json_error_reason(e.what())));
  } catch (const nlohmann::json::out_of_range& e) {  // a number past double's range (1e400)
    throw Error(detail::concat(file, ": header is not valid JSON: ", json_error_reason(e.what())));
  }
  KILN_CHECK(!too_deep, file, ": header nests deeper than ", kMaxDepth, " levels: not a safetensors header");
  KILN_CHECK(header.is_object(), file, ": header must be a JSON object, found ", json_type(header));
  KILN_CHECK(duplicate.empty(), file, ": header lists '", duplicate, "' twice");

  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      KILN_CHECK(value.is_object(), file, ": __metadata__ must be an object of strings, found ", json_type(value));
      for (const auto& [mk, mv] : value.items()) {
        KILN_CHECK(mv.is_string(), file, ": __metadata__ '", mk, "' must be a string, found ", json_type(mv));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = detail::concat(file, ": tensor '", key, "'");
    KILN_CHECK(value.is_object(), where, ": expected an object with dtype, shape and data_offsets, found ",
               json_type(value));
    TensorEntry e;
    e.name = key;

    auto dtype = value.find("dtype");
    KILN_CHECK(dtype != value.end(), where, ": missing \"dtype\"");
    KILN_CHECK(dtype->is_string(), where, ": \"dtype\" must be a string, found ", json_type(*dtype));
    e.dtype = dtype->get<std::string>();
    const size_t elem_size = file_dtype_size(e.dtype);
    KILN_CHECK(elem_size != 0, where, ": unknown dtype '", e.dtype,
               "' (expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)");

    auto shape = value.find("shape");
    KILN_CHECK(shape != value.end(), where, ": missing \"shape\"");
    KILN_CHECK(shape->is_array(), where, ": \"shape\" must be an array of integers, found ", json_type(*shape));
    // numel * elem_size in 128 bits: a crafted shape must not wrap around to
    // match the byte range.
    unsigned __int128 nbytes = elem_size;
    bool overflow = false;
    for (const auto& d : *shape) {
      KILN_CHECK(d.is_number_integer() || d.is_number_unsigned(), where,
                 ": \"shape\" must be an array of integers, found element ", json_type(d));
      if (d.is_number_unsigned()) {
        uint64_t u = d.get<uint64_t>();
        KILN_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where, ": extent ", u,
                   " in \"shape\" is too large");
        e.shape.push_back(static_cast<int64_t>(u));
      } else {
        int64_t v = d.get<int64_t>();
        KILN_CHECK(v >= 0, where, ": negative extent ", v, " in \"shape\"");
        e.shape.push_back(v);
      }
      nbytes *= static_cast<uint64_t>(e.shape.back());
      if (nbytes > std::numeric_limits<uint64_t>::max()) {
        overflow = true;
        nbytes = 0;  // stays 0 for the rest; the check below reports it
      }
    }
    KILN_CHECK(!overflow, where, ": shape ", to_string(e.shape), " of ", e.dtype, " overflows a 64-bit byte count");

    auto offsets = value.find("data_offsets");
    KILN_CHECK(offsets != value.end(), where, ": missing \"data_offsets\"");
    KILN_CHECK(offsets->is_array() && offsets->size() == 2 && (*offsets)[0].is_number_unsigned() &&
                   (*offsets)[1].is_number_unsigned(),
               where, ": \"data_offsets\" must be [begin, end] with non-negative integers, found ", brief(*offsets));
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    KILN_CHECK(e.begin <= e.end, where, ": data_offsets ", offsets_str(e.begin, e.end), " end before they begin");
    KILN_CHECK(static_cast<uint64_t>(nbytes) == e.end - e.begin, where, ": ", e.dtype, to_string(e.shape), " needs ",
               static_cast<uint64_t>(nbytes), " bytes, but data_offsets ", offsets_str(e.begin, e.end), " hold ",
               e.end - e.begin);
    KILN_CHECK(e.end <= data_size, where, ": data_offsets ", offsets_str(e.begin, e.end),
               " lie outside the data section (", data_size, " bytes): truncated file?");
    h.entries.push_back(std::move(e));
  }

  // As HF's reader: sorted by offset, the tensors tile the data section
  // exactly — no overlap, no gap, no trailing bytes.
  std::vector<const TensorEntry*> by_offset;
  for (const auto& e : h.entries) by_offset.push_back(&e);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry* e : by_offset) {
    KILN_CHECK(e->begin >= covered, file, ": tensor '", e->name, "' data_offsets ", offsets_str(e->begin, e->end),
               " overlap tensor '", previous ? previous->name : "", "' ",
               previous ? offsets_str(previous->begin, previous->end) : "");
    KILN_CHECK(e->begin == covered, file, ": bytes [", covered, ",", e->begin, ") of the data section before tensor '",
               e->name, "' belong to no tensor");
    covered = e->end;
    previous = e;
  }
  KILN_CHECK(covered == data_size, file, ": the data section has ", data_size, " bytes but the tensors cover ",
             covered, ": trailing bytes belong to no tensor");
  return h;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  const RegularFile opened(path);  // refuses FIFOs and devices without blocking
  const uint64_t file_size = opened.size();
  KILN_CHECK(file_size >= 8, file, ": truncated safetensors file: ", file_size,
             " bytes, shorter than the 8-byte header length");
  // Private and writable: pages are copied on first write, never written back.
  void* addr = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, opened.fd(), 0);
  int map_err = errno;
  if (addr == MAP_FAILED) throw Error(detail::concat(file, ": mmap failed: ", std::strerror(map_err)));

  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::make_shared<Mapping>(addr, file_size);
  SafetensorsHeader header = parse_safetensors_header({f.mapping_->bytes(), file_size}, file);
  f.data_start_ = header.data_start;
  f.entries_ = std::move(header.entries);
  f.metadata_ = std::move(header.metadata);
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_.emplace(f.entries_[i].name, i);
  return f;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::load(const std::string& name, Device device, bool keep_bf16) const {
  const TensorEntry* e = find(name);
  KILN_CHECK(e != nullptr, path_.string(), ": no tensor '", name, "' (the file has ", entries_.size(), " tensors)");
  if (device.kind != DeviceKind::CPU) {
    // Device memory: convert on the host (borrowing the mapping), then copy.
    Tensor host = load(name, Device::cpu(), keep_bf16);
    try {
      const Storage& from = *host.node()->data->storage;
      auto storage = std::make_shared<Storage>(device, from.nbytes());
      storage->copy_from_host(from.data(), from.nbytes());
      return Tensor::from_storage(std::move(storage), host.dtype(), e->shape, name);
    } catch (const Error& err) {
      throw Error(detail::concat(path_.string(), ": tensor '", name, "': cannot load onto ", device.str(), ": ",
                                 err.what()));
    }
  }
  // The mapping is private and writable; const here is only the file object's.
  auto* src = const_cast<unsigned char*>(mapping_->bytes()) + data_start_ + e->begin;
  const size_t nbytes = e->end - e->begin;
  const int64_t n = numel(e->shape);

  DType direct{};
  bool is_direct = true;
  if (e->dtype == "F32") direct = DType::f32;
  else if (e->dtype == "I64") direct = DType::i64;
  else if (e->dtype == "I32") direct = DType::i32;
  else if (e->dtype == "BOOL") direct = DType::b8;
  else if (e->dtype == "BF16" && keep_bf16) direct = DType::bf16;
  else is_direct = false;

  if (is_direct) {
    // Kernels read elements through typed pointers: borrow only aligned bytes
    // (always so in files written with 8-byte header padding).
    if (reinterpret_cast<uintptr_t>(src) % dtype_size(direct) == 0) {
      auto storage = std::make_shared<Storage>(device, src, nbytes, std::shared_ptr<const void>(mapping_));
      return Tensor::from_storage(std::move(storage), direct, e->shape, name);
    }
    return Tensor::from_data(src, direct, e->shape, device, name);
  }

  auto make = [&](DType dtype, auto fill) {
    auto storage = std::make_shared<Storage>(device, static_cast<size_t>(n) * dtype_size(dtype));
    fill(storage->data());
    return Tensor::from_storage(std::move(storage), dtype, e->shape, name);
  };
  auto to_f32 = [&](auto tag, auto f) {
    using Src = decltype(tag);
    return make(DType::f32, [&](void* dst) { convert<Src>(src, static_cast<float*>(dst), n, f); });
  };
  auto to_i64 = [&](auto tag) {
    using Src = decltype(tag);
    return make(DType::i64, [&](void* dst) {
      convert<Src>(src, static_cast<int64_t*>(dst), n, [](Src v) { return static_cast<int64_t>(v); });
    });
  };
  if (e->dtype == "F16") return to_f32(uint16_t{}, half_to_float);
  if (e->dtype == "BF16") return to_f32(uint16_t{}, bf16_to_float);
  if (e->dtype == "F64") return to_f32(double{}, [](double v) { return static_cast<float>(v); });
  if (e->dtype == "U8") return to_i64(uint8_t{});
  if (e->dtype == "I8") return to_i64(int8_t{});
  if (e->dtype == "I16") return to_i64(int16_t{});
  if (e->dtype == "U16") return to_i64(uint16_t{});
  if (e->dtype == "U32") return to_i64(uint32_t{});
  throw Error(detail::concat(path_.string(), ": tensor '", name, "': dtype ", e->dtype,
                             " is not supported by kiln (F32, F16, BF16, F64, I64, I32, I16, I8, U32, U16, U8, BOOL are)"));
}

namespace {

void load_all(const SafetensorsFile& f, Device device, bool keep_bf16, std::map<std::string, Tensor>& out) {
  for (const auto& e : f.entries()) out[e.name] = f.load(e.name, device, keep_bf16);
}

std::map<std::string, Tensor> load_sharded(const std::filesystem::path& index_path, Device device, bool keep_bf16) {
  const std::string file = index_path.string();
  nlohmann::json index = read_json_file(index_path);
  KILN_CHECK(index.is_object(), file, ": expected a JSON object with \"weight_map\", found ", index.type_name());
  auto wm = index.find("weight_map");
  KILN_CHECK(wm != index.end() && wm->is_object(), file, ": \"weight_map\" must be an object {tensor: shard file}");

  std::map<std::string, std::vector<std::string>> tensors_of_shard;
  for (const auto& [tensor, shard] : wm->items()) {
    KILN_CHECK(shard.is_string(), file, ": weight_map['", tensor, "'] must be a shard file name, found ",
               shard.type_name());
    tensors_of_shard[shard.get<std::string>()].push_back(tensor);
  }

  const auto dir = index_path.parent_path();
  std::map<std::string, Tensor> out;
  std::map<std::string, std::string> shard_of;  // tensor -> shard it was loaded from
  for (const auto& [shard, tensors] : tensors_of_shard) {
    std::filesystem::path shard_rel(shard);
    const bool climbs = std::any_of(shard_rel.begin(), shard_rel.end(), [](const auto& part) { return part == ".."; });
    KILN_CHECK(!shard.empty() && shard_rel.is_relative() && !climbs, file, ": shard '", shard,
               "' must be a file name relative to the index's directory (inside it)");
    const auto shard_path = dir / shard_rel;
    std::error_code ec;
    KILN_CHECK(std::filesystem::is_regular_file(shard_path, ec), file, ": shard '", shard, "' (holding '",
               tensors.front(), "'", tensors.size() > 1 ? detail::concat(" and ", tensors.size() - 1, " more") : "",
               ") does not exist: ", shard_path.string());
    SafetensorsFile f = SafetensorsFile::open(shard_path);
    for (const auto& t : tensors)
      KILN_CHECK(f.find(t) != nullptr, shard_path.string(), ": tensor '", t, "' is listed in ", file,
                 " but absent from this shard");
    // Like transformers, every tensor in a shard is loaded, listed or not.
    for (const auto& e : f.entries()) {
      auto [it, inserted] = shard_of.emplace(e.name, shard);
      KILN_CHECK(inserted, file, ": tensor '", e.name, "' is in two shards: '", it->second, "' and '", shard, "'");
      out[e.name] = f.load(e.name, device, keep_bf16);
    }
  }
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& file_or_dir, Device device, bool keep_bf16) {
  std::error_code ec;
  if (std::filesystem::is_directory(file_or_dir, ec)) {
    // transformers prefers the single file when both are present.
    if (std::filesystem::exists(file_or_dir / kSingleFile, ec))
      return load_safetensors(file_or_dir / kSingleFile, device, keep_bf16);
    if (std::filesystem::exists(file_or_dir / kIndexFile, ec)) return load_sharded(file_or_dir / kIndexFile, device, keep_bf16);
    throw Error(detail::concat(file_or_dir.string(), ": no ", kSingleFile, " or ", kIndexFile, " in this directory"));
  }
  if (ends_with(file_or_dir.filename().string(), ".index.json")) return load_sharded(file_or_dir, device, keep_bf16);
  std::map<std::string, Tensor> out;
  load_all(SafetensorsFile::open(file_or_dir), device, keep_bf16, out);
  return out;
}

namespace {

// The header of a file holding `specs` in order, padded with spaces so the
// data section starts 8-byte aligned (every tensor then loads zero-copy).
std::string header_text(const std::vector<TensorSpec>& specs, const std::map<std::string, std::string>& metadata,
                        const std::string& file) {
  ojson header = ojson::object();
  ojson meta = ojson::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header[kMetadataKey] = std::move(meta);
  uint64_t offset = 0;
  for (const auto& spec : specs) {
    KILN_CHECK(!spec.name.empty() && spec.name != kMetadataKey, file, ": invalid tensor name '", spec.name, "'");
    KILN_CHECK(!header.contains(spec.name), file, ": tensor '", spec.name, "' is given twice");
    const uint64_t nbytes = static_cast<uint64_t>(numel(spec.shape)) * dtype_size(spec.dtype);
    header[spec.name] = {{"dtype", file_dtype_of(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat(file, ": cannot write the header: ", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// Appends t's bytes as they lie in its storage (device memory through a
// bounded host buffer).
void append_tensor(AtomicFileWriter& writer, const Tensor& t) {
  const size_t nbytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  if (nbytes == 0) return;
  if (t.node()->op != ir::Op::Data) runtime::DeviceContext::get(t.device()).materialize({t.impl()});
  const Buffer& data = *t.node()->data;
  data.wait();
  const Storage& storage = *data.storage;
  KILN_CHECK(storage.nbytes() >= nbytes, writer.path().string(), ": tensor storage holds ", storage.nbytes(),
             " bytes, expected ", nbytes);
  if (storage.on_host()) {
    writer.append({static_cast<const char*>(storage.data()), nbytes});
    return;
  }
  constexpr size_t kChunk = size_t{64} << 20;
  std::vector<char> staged(std::min(nbytes, kChunk));
  for (size_t at = 0; at < nbytes; at += staged.size()) {
    const size_t n = std::min(staged.size(), nbytes - at);
    storage.copy_to_host(staged.data(), n, at);
    writer.append({staged.data(), n});
  }
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                      const TensorProducer& produce, const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  const std::string text = header_text(specs, metadata, file);
  AtomicFileWriter writer(path);
  const uint64_t header_len = text.size();
  writer.append({reinterpret_cast<const char*>(&header_len), sizeof header_len});
  writer.append(text);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const Tensor t = produce(i);
    KILN_CHECK(t.defined(), file, ": tensor '", spec.name, "' is undefined");
    KILN_CHECK(t.dtype() == spec.dtype && t.shape() == spec.shape, file, ": tensor '", spec.name, "' was declared ",
               dtype_name(spec.dtype), to_string(spec.shape), " in the header but is ", dtype_name(t.dtype()),
               to_string(t.shape()));
    append_tensor(writer, t);
  }
  writer.commit();
}

void save_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(t.defined(), path.string(), ": tensor '", name, "' is undefined");
    specs.push_back({name, t.dtype(), t.shape()});
  }
  save_safetensors(path, specs, [&](size_t i) { return tensors[i].second; }, metadata);
}

uint64_t parse_shard_size(const std::string& text, const std::string& what) {
  static const std::pair<std::string_view, double> kUnits[] = {{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
  std::string number = text;
  double multiplier = 1;
  if (text.size() > 2) {
    std::string unit = text.substr(text.size() - 2);
    std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::toupper(c); });
    for (auto& [name, m] : kUnits)
      if (unit == name) number = text.substr(0, text.size() - 2), multiplier = m;
  }
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const double bytes = value * multiplier;
  KILN_CHECK(used > 0 && used == number.size() && bytes >= 1 && bytes < 1.8e19, what, ": '", text,
             "' is not a size (a byte count, or a number with KB, MB, GB or TB, e.g. 5GB)");
  return static_cast<uint64_t>(bytes);
}

namespace {

// huggingface_hub's split_state_dict_into_shards_factory: in order, a new
// shard when the next tensor would overflow the current one, and a tensor
// larger than the limit alone in a shard of its own.
std::vector<std::vector<size_t>> split_into_shards(const std::vector<TensorSpec>& specs, uint64_t max_shard_size) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t size = static_cast<uint64_t>(numel(specs[i].shape)) * dtype_size(specs[i].dtype);
    if (size > max_shard_size) {
      shards.push_back({i});
      continue;
    }
    if (current_size + size > max_shard_size) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

// Weight files of another save in `dir` (the single file, an index, shards
// of any count) that `keep` does not name.
void remove_stale_weights(const std::filesystem::path& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool shard = name.size() == 32 && name.starts_with("model-") && name.substr(11, 4) == "-of-" &&
                       name.ends_with(".safetensors");
    if ((shard || name == kSingleFile || name == kIndexFile) && !keep.count(name)) {
      std::filesystem::remove(entry.path(), ec);
      KILN_CHECK(!ec, entry.path().string(), ": cannot remove a weight file of an earlier save: ", ec.message());
    }
  }
}

}  // namespace

void save_pretrained_weights(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                             const TensorProducer& produce, uint64_t max_shard_size) {
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  const std::vector<std::vector<size_t>> shards = split_into_shards(specs, max_shard_size);
  if (shards.size() == 1) {
    save_safetensors(dir / kSingleFile, specs, produce, metadata);
    remove_stale_weights(dir, {kSingleFile});
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  std::set<std::string> written{kIndexFile};
  uint64_t total_size = 0, total_parameters = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    std::vector<TensorSpec> shard_specs;
    for (size_t i : shards[s]) {
      shard_specs.push_back(specs[i]);
      weight_map[specs[i].name] = name;
      total_parameters += static_cast<uint64_t>(numel(specs[i].shape));
      total_size += static_cast<uint64_t>(numel(specs[i].shape)) * dtype_size(specs[i].dtype);
    }
    save_safetensors(dir / name, shard_specs, [&](size_t i) { return produce(shards[s][i]); }, metadata);
    written.insert(name);
  }
  const nlohmann::json index = {{"metadata", {{"total_parameters", total_parameters}, {"total_size", total_size}}},
                                {"weight_map", weight_map}};
  write_json_file_atomic(dir / kIndexFile, index);
  remove_stale_weights(dir, written);
}

}  // namespace kiln::io
