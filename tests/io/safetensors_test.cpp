// Round trips, zero-copy loading, dtype conversion and sharded checkpoints.
#include "kiln/io/safetensors.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/backend/cuda/cuda.h"
#endif

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "io/io_test_util.h"
#include "kiln/core/buffer.h"
#include "kiln/io/json_file.h"
#include "kiln/ir/node.h"
#include "kiln/runtime/ops.h"

namespace kiln::io {
namespace {

using testing::bytes_of;
using testing::raw_safetensors;
using testing::TempDir;
using testing::throws_with;

const void* storage_ptr(const Tensor& t) { return t.node()->data->storage->data(); }

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  uint8_t mask[3] = {1, 0, 1};
  int32_t ids[4] = {-7, 0, 2147483647, -2147483647 - 1};
  return {
      {"encoder.weight", Tensor::from_vector(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, -0.f, 1e-30f}, {2, 3})},
      {"position_ids", Tensor::from_vector(std::vector<int64_t>{0, 1, -1, std::numeric_limits<int64_t>::max()}, {4})},
      {"token_ids", Tensor::from_data(ids, DType::i32, {2, 2})},
      {"mask", Tensor::from_data(mask, DType::b8, {3})},
      {"scale", Tensor::scalar(0.125f)},
      {"empty", Tensor::from_vector(std::vector<float>{}, {0, 5})},
  };
}

TEST(Safetensors, RoundTripKeepsNamesOrderDtypesShapesAndValues) {
  TempDir dir;
  auto tensors = sample_tensors();
  save_safetensors(dir / "model.safetensors", tensors, {{"step", "42"}});
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});

  auto f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_EQ(f.path(), dir / "model.safetensors");
  ASSERT_EQ(f.entries().size(), tensors.size());
  const char* dtypes[] = {"F32", "I64", "I32", "BOOL", "F32", "F32"};
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& e = f.entries()[i];
    EXPECT_EQ(e.name, tensors[i].first);
    EXPECT_EQ(e.dtype, dtypes[i]);
    EXPECT_EQ(e.shape, tensors[i].second.shape());
    EXPECT_EQ(e.begin, offset) << e.name;  // contiguous, in the given order
    offset = e.end;
  }
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "42"}}));
  EXPECT_EQ(f.find("nope"), nullptr);
  ASSERT_NE(f.find("mask"), nullptr);
  EXPECT_EQ(f.find("mask")->shape, Shape{3});

  auto w = f.load("encoder.weight");
  EXPECT_EQ(w.dtype(), DType::f32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.name(), "encoder.weight");
  auto wv = w.to_vector<float>();
  auto want = tensors[0].second.to_vector<float>();
  ASSERT_EQ(wv.size(), want.size());
  for (size_t i = 0; i < wv.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(wv[i]), std::bit_cast<uint32_t>(want[i]));
  EXPECT_EQ(f.load("position_ids").to_vector<int64_t>(), tensors[1].second.to_vector<int64_t>());
  EXPECT_EQ(f.load("token_ids").dtype(), DType::i32);
  EXPECT_EQ(f.load("token_ids").to_vector<int32_t>(), tensors[2].second.to_vector<int32_t>());
  EXPECT_EQ(f.load("mask").dtype(), DType::b8);
  EXPECT_EQ(f.load("mask").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 1}));
  auto scale = f.load("scale");
  EXPECT_EQ(scale.shape(), Shape{});
  EXPECT_EQ(scale.item(), 0.125f);
  auto empty = f.load("empty");
  EXPECT_EQ(empty.shape(), (Shape{0, 5}));
  EXPECT_TRUE(empty.to_vector<float>().empty());
}

TEST(Safetensors, LoadSafetensorsReturnsEveryTensor) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto all = load_safetensors(dir / "m.safetensors");
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(all.at("position_ids").to_vector<int64_t>()[3], std::numeric_limits<int64_t>::max());
}

TEST(Safetensors, WrittenLayoutIsTheStandardOne) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors(), {{"format", "np"}});
  std::string raw = read_file(dir / "m.safetensors");
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header = raw.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"np\"}", 0), 0u) << header;  // user value overrides
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["encoder.weight"]["data_offsets"], nlohmann::json::parse("[0,24]"));
  EXPECT_EQ(j["scale"]["shape"], nlohmann::json::array());
  // 24 + 32 + 16 + 3 + 4 + 0 bytes of data.
  EXPECT_EQ(raw.size(), 8 + n + 79);
  float first;
  std::memcpy(&first, raw.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.5f);
}

TEST(Safetensors, NoTensorsAtAll) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", {});
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_TRUE(f.entries().empty());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(load_safetensors(dir / "m.safetensors").empty());
}

TEST(Safetensors, SaveRejectsDuplicateAndReservedNames) {
  TempDir dir;
  auto t = Tensor::scalar(1.f);
  EXPECT_TRUE(throws_with([&] { save_safetensors(dir / "m.safetensors", {{"a", t}, {"b", t}, {"a", t}}); },
                          {"m.safetensors", "'a'", "twice"}));
  EXPECT_THROW(save_safetensors(dir / "m.safetensors", {{"__metadata__", t}}), kiln::Error);
  EXPECT_THROW(save_safetensors(dir / "m.safetensors", {{"", t}}), kiln::Error);
  EXPECT_THROW(save_safetensors(dir / "m.safetensors", {{"u", Tensor()}}), kiln::Error);
  EXPECT_TRUE(dir.listing().empty());
}

TEST(Safetensors, SavesPendingAndViewTensors) {
  TempDir dir;
  auto a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto b = Tensor::from_vector(std::vector<float>{10, 20, 30, 40, 50, 60}, {2, 3});
  Tensor sum = a + b;  // a pending lazy value
  save_safetensors(dir / "m.safetensors", {{"sum", sum}});
  EXPECT_EQ(load_safetensors(dir / "m.safetensors").at("sum").to_vector<float>(),
            (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(Safetensors, F32LoadsWithoutCopying) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  auto a = f.load("encoder.weight");
  auto b = f.load("encoder.weight");
  EXPECT_EQ(storage_ptr(a), storage_ptr(b));
  // The tensors' bytes lie one after another in the data section.
  auto ids = f.load("position_ids");
  auto tok = f.load("token_ids");
  auto mask = f.load("mask");
  const char* base = static_cast<const char*>(storage_ptr(a));
  EXPECT_EQ(static_cast<const char*>(storage_ptr(ids)), base + 24);
  EXPECT_EQ(static_cast<const char*>(storage_ptr(tok)), base + 24 + 32);
  EXPECT_EQ(static_cast<const char*>(storage_ptr(mask)), base + 24 + 32 + 16);
}

TEST(Safetensors, MappingOutlivesTheFileObject) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  Tensor w;
  {
    auto f = SafetensorsFile::open(dir / "m.safetensors");
    w = f.load("encoder.weight");
  }
  EXPECT_EQ(w.to_vector<float>()[2], 3.25f);
}

TEST(Safetensors, WritesIntoLoadedMemoryNeverReachTheFile) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto w = SafetensorsFile::open(dir / "m.safetensors").load("encoder.weight");
  static_cast<float*>(w.node()->data->storage->data())[0] = 99.f;  // as a donated step output would
  EXPECT_EQ(w.to_vector<float>()[0], 99.f);
  EXPECT_EQ(SafetensorsFile::open(dir / "m.safetensors").load("encoder.weight").to_vector<float>()[0], 1.5f);
}

TEST(Safetensors, LoadedTensorsSurviveTheFileBeingReplaced) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto w = load_safetensors(dir / "m.safetensors").at("encoder.weight");
  save_safetensors(dir / "m.safetensors", {{"encoder.weight", Tensor::from_vector(std::vector<float>(6, 7.f), {2, 3})}});
  EXPECT_EQ(w.to_vector<float>()[0], 1.5f);
  EXPECT_EQ(load_safetensors(dir / "m.safetensors").at("encoder.weight").to_vector<float>()[0], 7.f);
}

TEST(Safetensors, LoadedTensorsWorkInOps) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto all = load_safetensors(dir / "m.safetensors");
  auto doubled = all.at("encoder.weight") * Tensor::scalar(2.f);
  EXPECT_EQ(doubled.to_vector<float>()[0], 3.f);
}

TEST(Safetensors, MissingTensorNamesFileAndTensor) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_TRUE(throws_with([&] { f.load("bert.pooler.dense.weight"); },
                          {(dir / "m.safetensors").string(), "'bert.pooler.dense.weight'"}));
}

TEST(Safetensors, OpenMissingFileNamesIt) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir / "nope.safetensors"); }, {"nope.safetensors"}));
  EXPECT_TRUE(throws_with([&] { SafetensorsFile::open(dir.path()); }, {dir.path().string(), "regular file"}));
}

// --- conversion ---------------------------------------------------------------

std::string one_tensor(const std::string& dtype, const std::string& shape, const std::string& data) {
  std::string header = "{\"t\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[0," +
                       std::to_string(data.size()) + "]}}";
  return raw_safetensors(header, data);
}

TEST(Safetensors, F16ConvertsToF32) {
  TempDir dir;
  std::vector<uint16_t> h = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3555};
  write_file_atomic(dir / "h.safetensors", one_tensor("F16", "[11]", bytes_of(h)));
  auto t = SafetensorsFile::open(dir / "h.safetensors").load("t");
  EXPECT_EQ(t.dtype(), DType::f32);
  auto v = t.to_vector<float>();
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 65504.f);
  EXPECT_EQ(v[3], std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(v[4], std::ldexp(1023.f, -24));  // largest subnormal
  EXPECT_EQ(v[5], std::ldexp(1.f, -14));  // smallest normal
  EXPECT_EQ(v[6], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[7], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[8]));
  EXPECT_EQ(std::bit_cast<uint32_t>(v[9]), 0x80000000u);  // -0
  EXPECT_EQ(v[10], 0.333251953125f);  // 0x3555, the f16 nearest 1/3
}

TEST(Safetensors, BF16ConvertsToF32) {
  TempDir dir;
  std::vector<uint16_t> h = {0x3F80, 0xC020, 0x477F, 0x0001, 0x7F80, 0xFF80, 0x7FC0, 0x7F7F};
  write_file_atomic(dir / "b.safetensors", one_tensor("BF16", "[2,4]", bytes_of(h)));
  auto t = SafetensorsFile::open(dir / "b.safetensors").load("t");
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape(), (Shape{2, 4}));
  auto v = t.to_vector<float>();
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 65280.f);
  EXPECT_EQ(v[3], std::ldexp(1.f, -133));
  EXPECT_EQ(v[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[5], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[6]));
  EXPECT_EQ(std::bit_cast<uint32_t>(v[7]), 0x7F7F0000u);
}

TEST(Safetensors, F64ConvertsToF32) {
  TempDir dir;
  std::vector<double> d = {1.0, -2.5, 1e300, 0.1};
  write_file_atomic(dir / "d.safetensors", one_tensor("F64", "[4]", bytes_of(d)));
  auto v = SafetensorsFile::open(dir / "d.safetensors").load("t").to_vector<float>();
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[3], 0.1f);
}

TEST(Safetensors, SmallIntegersConvertToI64) {
  TempDir dir;
  std::vector<uint8_t> u8 = {0, 255};
  std::vector<int8_t> i8 = {-128, 127};
  std::vector<int16_t> i16 = {-32768, 32767};
  std::vector<uint16_t> u16 = {65535, 1};
  std::vector<uint32_t> u32 = {4294967295u, 2};
  std::string data = bytes_of(u8) + bytes_of(i8) + bytes_of(i16) + bytes_of(u16) + bytes_of(u32);
  std::string header =
      R"({"u8":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
      R"("i8":{"dtype":"I8","shape":[2],"data_offsets":[2,4]},)"
      R"("i16":{"dtype":"I16","shape":[2],"data_offsets":[4,8]},)"
      R"("u16":{"dtype":"U16","shape":[2],"data_offsets":[8,12]},)"
      R"("u32":{"dtype":"U32","shape":[2],"data_offsets":[12,20]}})";
  write_file_atomic(dir / "i.safetensors", raw_safetensors(header, data));
  auto all = load_safetensors(dir / "i.safetensors");
  for (auto& [name, t] : all) EXPECT_EQ(t.dtype(), DType::i64) << name;
  EXPECT_EQ(all.at("u8").to_vector<int64_t>(), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(all.at("i8").to_vector<int64_t>(), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(all.at("i16").to_vector<int64_t>(), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(all.at("u16").to_vector<int64_t>(), (std::vector<int64_t>{65535, 1}));
  EXPECT_EQ(all.at("u32").to_vector<int64_t>(), (std::vector<int64_t>{4294967295LL, 2}));
}

TEST(Safetensors, MisalignedF32IsCopiedNotBorrowed) {
  TempDir dir;
  // The data section is 8-byte aligned; "f" starts one byte into it.
  std::vector<float> f = {1.f, 2.f};
  std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  write_file_atomic(dir / "m.safetensors", raw_safetensors(header, std::string(1, '\x05') + bytes_of(f)));
  auto t = SafetensorsFile::open(dir / "m.safetensors").load("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(storage_ptr(t)) % 4, 0u);
  EXPECT_EQ(t.to_vector<float>(), f);
}

TEST(Safetensors, UnsupportedButValidDtypeFailsOnlyWhenLoaded) {
  TempDir dir;
  std::string header = R"({"q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"f":{"dtype":"F32","shape":[],"data_offsets":[2,6]}})";
  float one = 1.f;
  write_file_atomic(dir / "m.safetensors", raw_safetensors(header, "ab" + std::string(reinterpret_cast<char*>(&one), 4)));
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(f.load("f").item(), 1.f);
  EXPECT_TRUE(throws_with([&] { f.load("q"); }, {"m.safetensors", "'q'", "F8_E4M3", "not supported"}));
}

TEST(Safetensors, LoadOntoCudaNeedsACudaDevice) {
  TempDir dir;
  save_safetensors(dir / "m.safetensors", sample_tensors());
  auto f = SafetensorsFile::open(dir / "m.safetensors");
#ifdef KILN_HAVE_CUDA
  if (backend::cuda::device_count() > 0) {  // copied into device memory
    Tensor t = f.load("scale", Device::cuda());
    EXPECT_EQ(t.device(), Device::cuda());
    EXPECT_EQ(t.to_vector<float>(), f.load("scale").to_vector<float>());
    return;
  }
#endif
  // No device (or no CUDA backend in this build): a clear error naming file, tensor and device.
  EXPECT_TRUE(throws_with([&] { f.load("scale", Device::cuda()); }, {"m.safetensors", "'scale'", "cuda:0", "CUDA"}));
}

// --- directories and shards ---------------------------------------------------

void write_two_shards(const TempDir& dir) {
  save_safetensors(dir / "model-00001-of-00002.safetensors",
                   {{"a.weight", Tensor::from_vector(std::vector<float>{1, 2}, {2})},
                    {"a.bias", Tensor::from_vector(std::vector<float>{3}, {1})}});
  save_safetensors(dir / "model-00002-of-00002.safetensors",
                   {{"b.ids", Tensor::from_vector(std::vector<int64_t>{4, 5, 6}, {3})}});
  write_json_file_atomic(dir / "model.safetensors.index.json",
                         {{"metadata", {{"total_size", 36}}},
                          {"weight_map",
                           {{"a.weight", "model-00001-of-00002.safetensors"},
                            {"a.bias", "model-00001-of-00002.safetensors"},
                            {"b.ids", "model-00002-of-00002.safetensors"}}}});
}

TEST(SafetensorsDir, LoadsShardedCheckpoint) {
  TempDir dir;
  write_two_shards(dir);
  for (const auto& path : {dir.path(), dir / "model.safetensors.index.json"}) {
    auto all = load_safetensors(path);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all.at("a.weight").to_vector<float>(), (std::vector<float>{1, 2}));
    EXPECT_EQ(all.at("a.bias").to_vector<float>(), (std::vector<float>{3}));
    EXPECT_EQ(all.at("b.ids").to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6}));
  }
}

TEST(SafetensorsDir, LoadsSingleFileFromDirectory) {
  TempDir dir;
  save_safetensors(dir / "model.safetensors", sample_tensors());
  auto all = load_safetensors(dir.path());
  EXPECT_EQ(all.size(), 6u);
  EXPECT_EQ(all.at("scale").item(), 0.125f);
}

TEST(SafetensorsDir, EmptyDirectoryNamesWhatIsMissing) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); },
                          {dir.path().string(), "model.safetensors", "model.safetensors.index.json"}));
}

TEST(SafetensorsDir, MissingShardNamesIndexShardAndTensor) {
  TempDir dir;
  write_two_shards(dir);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); },
                          {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "'b.ids'",
                           "does not exist"}));
}

TEST(SafetensorsDir, TensorListedButAbsentFromShard) {
  TempDir dir;
  write_two_shards(dir);
  auto index = read_json_file(dir / "model.safetensors.index.json");
  index["weight_map"]["c.weight"] = "model-00002-of-00002.safetensors";
  write_json_file_atomic(dir / "model.safetensors.index.json", index);
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); },
                          {"model-00002-of-00002.safetensors", "'c.weight'", "absent"}));
}

TEST(SafetensorsDir, SameTensorInTwoShards) {
  TempDir dir;
  write_two_shards(dir);
  save_safetensors(dir / "model-00002-of-00002.safetensors",
                   {{"b.ids", Tensor::from_vector(std::vector<int64_t>{4, 5, 6}, {3})},
                    {"a.bias", Tensor::from_vector(std::vector<float>{9}, {1})}});
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); },
                          {"'a.bias'", "two shards", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}));
}

TEST(SafetensorsDir, MalformedIndex) {
  TempDir dir;
  write_two_shards(dir);
  write_json_file_atomic(dir / "model.safetensors.index.json", {{"metadata", {}}});
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model.safetensors.index.json", "weight_map"}));
  write_json_file_atomic(dir / "model.safetensors.index.json", {{"weight_map", {{"a.weight", 3}}}});
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model.safetensors.index.json", "'a.weight'"}));
  write_json_file_atomic(dir / "model.safetensors.index.json", {{"weight_map", {{"a.weight", "/etc/passwd"}}}});
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model.safetensors.index.json", "relative"}));
  // A relative path that climbs out of the directory is refused too, before anything is opened.
  write_json_file_atomic(dir / "model.safetensors.index.json",
                         {{"weight_map", {{"a.weight", "../" + dir.path().filename().string() + "/model-00001-of-00002.safetensors"}}}});
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model.safetensors.index.json", "(inside it)"}));
  write_file_atomic(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model.safetensors.index.json:1:"}));
}

TEST(SafetensorsDir, CorruptShardNamesTheShard) {
  TempDir dir;
  write_two_shards(dir);
  write_file_atomic(dir / "model-00001-of-00002.safetensors", "junk");
  EXPECT_TRUE(throws_with([&] { load_safetensors(dir.path()); }, {"model-00001-of-00002.safetensors", "truncated"}));
}

}  // namespace
}  // namespace kiln::io
