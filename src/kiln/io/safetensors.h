#pragma once
// Hugging Face safetensors: memory-mapped reading (zero-copy where kiln has
// the dtype), sharded checkpoints, and atomic writing.
//
// Layout: u64 little-endian header length N, N bytes of JSON header
//   {"__metadata__": {"format": "pt", ...}, "<name>": {"dtype": "F32", "shape": [...],
//    "data_offsets": [begin, end]}, ...}
// then the data section; offsets are relative to its start (byte 8 + N).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/shape.h"
#include "kiln/runtime/tensor.h"

namespace kiln::io {

struct TensorEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32","F16","BF16","F64","I64","I32","I16","I8","U8","BOOL"
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data section
};

// What a safetensors header declares, validated against the bytes that
// follow it: the tensors (header order), __metadata__, and where the data
// section starts (8 + N).
struct SafetensorsHeader {
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

// The header of a whole safetensors file held in memory (length prefix,
// header, data section), with every check SafetensorsFile::open makes;
// problems are kiln::Errors naming `file`. open() reads files through it;
// it also serves in-memory callers (the fuzz target fuzz/fuzz_safetensors).
SafetensorsHeader parse_safetensors_header(std::span<const unsigned char> bytes, const std::string& file);

class SafetensorsFile {
 public:
  // Maps the file PROT_READ|PROT_WRITE, MAP_PRIVATE: copy-on-write, so a step
  // may write into a loaded weight's memory without touching the file.
  // Files replaced with write_file_atomic (a new inode) leave existing
  // mappings intact; truncating a mapped file in place is not survivable
  // (SIGBUS), as with any mmap reader.
  // Validates the whole header; every problem is a kiln::Error naming the file
  // (and the tensor, and what was expected vs found).
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::vector<TensorEntry>& entries() const { return entries_; }  // header order
  const TensorEntry* find(const std::string& name) const;              // null if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }

  // As a kiln Tensor on `device` (only cpu for now): F32, I64, I32, BOOL
  // without copying (Storage borrowing the mapping, which stays alive while
  // any tensor uses it; copied only if the bytes are misaligned for the
  // type); F16, BF16, F64 converted to f32; U8/I8/I16/U16/U32 converted to
  // i64. keep_bf16: BF16 stays bf16, borrowed from the mapping like F32 (a
  // frozen base's weights, which need not widen to f32). Throws naming file
  // + tensor if absent.
  Tensor load(const std::string& name, Device device = Device::cpu(), bool keep_bf16 = false) const;

  struct Mapping;  // the mmap'd file; public so the .cpp's helpers can name it

 private:
  std::filesystem::path path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_start_ = 0;  // 8 + N
  std::vector<TensorEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A model file, or a directory holding model.safetensors or a sharded
// model.safetensors.index.json ({"metadata":..., "weight_map": {tensor: shard}})
// (a path to the index file itself works too): every tensor by name. Errors
// name the file and tensor (missing shard, tensor listed in the index but
// absent from its shard, same tensor in two shards). keep_bf16 as in
// SafetensorsFile::load.
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& file_or_dir,
                                               Device device = Device::cpu(), bool keep_bf16 = false);

// Standard layout, header padded with spaces to a multiple of 8 bytes, then
// the tensors' bytes in the given order, contiguous. f32/i64/i32/bool/bf16
// tensors. `metadata` goes into __metadata__ after {"format": "pt"} (and may
// override it). Written atomically. Duplicate names are an error.
void save_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A tensor to be written, known by its name, dtype and shape before its values.
struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

// Computes the i-th tensor of a streamed write (of specs[i]'s dtype and shape).
using TensorProducer = std::function<Tensor(size_t i)>;

// The same file as save_safetensors, streamed: the header comes from `specs`
// (every offset is known from the shapes), then produce(i) is called for each
// tensor in turn and its bytes appended before the next is produced, so a
// writer that drops each tensor after producing it holds one at a time (an
// 8B-parameter checkpoint need never be in memory whole). A produced tensor
// of another dtype or shape than its spec is an error naming the file.
void save_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                      const TensorProducer& produce, const std::map<std::string, std::string>& metadata = {});

// transformers' save_pretrained default max_shard_size ("50GB"; transformers 4 used "5GB").
constexpr uint64_t kDefaultMaxShardSize = 50'000'000'000ULL;

// huggingface_hub's parse_size_to_int: "5GB" -> 5e9 (units KB, MB, GB, TB,
// powers of 1000), or a plain byte count. Bad text is an error naming `what`.
uint64_t parse_shard_size(const std::string& text, const std::string& what);

// A model's weights as transformers' save_pretrained writes them into `dir`:
// model.safetensors when they fit max_shard_size bytes, else shards
// model-0000i-of-0000n.safetensors split as huggingface_hub splits them (in
// order, a new shard when the next tensor would overflow the current one; a
// tensor larger than the limit in a shard of its own, placed when met) and
// model.safetensors.index.json ({"metadata": {"total_parameters",
// "total_size"}, "weight_map": {tensor: shard}}), which load_safetensors
// reads. Streamed as the save_safetensors above; each file atomic, the index
// last; weight files of an earlier save that this one does not rewrite are
// removed (as transformers cleans the folder), so the directory never holds
// both layouts.
void save_pretrained_weights(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs,
                             const TensorProducer& produce, uint64_t max_shard_size = kDefaultMaxShardSize);

}  // namespace kiln::io
