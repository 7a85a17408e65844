#include "kiln/io/compressed.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <climits>

#include "kiln/core/error.h"
#include "kiln/core/file.h"

namespace kiln::io {

namespace fs = std::filesystem;

std::string compression_suffix(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".gz" || ext == ".zst" ? ext : "";
}

fs::path without_compression(const fs::path& path) {
  return compression_suffix(path).empty() ? path : fs::path(path).replace_extension();
}

std::string gunzip(std::string_view bytes, const std::string& where) {
  z_stream z{};
  KILN_CHECK(inflateInit2(&z, 15 + 32) == Z_OK, where, ": cannot start zlib");  // 32: a gzip or zlib header
  std::string out;
  char buf[1 << 16];
  size_t pos = 0;
  auto fail = [&](const std::string& what) {
    inflateEnd(&z);
    throw Error(where + ": " + what);
  };
  for (;;) {
    if (z.avail_in == 0 && pos < bytes.size()) {  // zlib counts input in 32 bits
      const size_t chunk = std::min<size_t>(bytes.size() - pos, UINT_MAX);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + pos));
      z.avail_in = static_cast<uInt>(chunk);
      pos += chunk;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR)
      fail("not a valid gzip stream (" + std::string(z.msg ? z.msg : "error " + std::to_string(rc)) + ")");
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0 && pos == bytes.size()) break;
      inflateReset(&z);  // the next gzip member
    } else if (rc == Z_BUF_ERROR && z.avail_in == 0 && pos == bytes.size()) {
      fail("truncated gzip stream (it ends before its last block)");
    }
  }
  inflateEnd(&z);
  return out;
}

std::string unzstd(std::string_view bytes, const std::string& where) {
  ZSTD_DStream* d = ZSTD_createDStream();
  KILN_CHECK(d, where, ": cannot start zstd");
  std::string out;
  char buf[1 << 16];
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  size_t left = 0;  // 0 once a frame has ended and been flushed
  for (;;) {
    ZSTD_outBuffer o{buf, sizeof buf, 0};
    left = ZSTD_decompressStream(d, &o, &in);
    if (ZSTD_isError(left)) {
      const std::string msg = ZSTD_getErrorName(left);
      ZSTD_freeDStream(d);
      throw Error(where + ": not a valid zstd stream (" + msg + ")");
    }
    out.append(buf, o.pos);
    if (in.pos == in.size && o.pos < o.size) break;  // every byte read and everything decoded flushed
  }
  ZSTD_freeDStream(d);
  KILN_CHECK(!ZSTD_isError(left) && left == 0, where, ": truncated zstd stream (it ends inside a frame)");
  return out;
}

std::string read_data_file(const fs::path& path) {
  const std::string suffix = compression_suffix(path);
  if (suffix.empty()) return read_file(path);
  const std::string bytes = read_file(path);
  return suffix == ".gz" ? gunzip(bytes, path.string()) : unzstd(bytes, path.string());
}

}  // namespace kiln::io
