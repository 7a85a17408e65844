#pragma once
// Data files compressed with gzip (.gz) or zstd (.zst), read as Hugging Face
// datasets reads them: "train.csv.gz" is a CSV file.
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln::io {

// ".gz" or ".zst" (any case) when `path` names a compressed file, else "".
std::string compression_suffix(const std::filesystem::path& path);

// `path` without its compression suffix: "train.csv.gz" -> "train.csv".
std::filesystem::path without_compression(const std::filesystem::path& path);

// The file's bytes, decompressed when its name ends in .gz or .zst. A corrupt
// or truncated stream is an error naming the file.
std::string read_data_file(const std::filesystem::path& path);

// The decompressed bytes of a gzip (several members are read one after the
// other, as gzip -d does; a zlib stream too) or zstd (several frames) stream;
// errors name `where`.
std::string gunzip(std::string_view bytes, const std::string& where);
std::string unzstd(std::string_view bytes, const std::string& where);

}  // namespace kiln::io
