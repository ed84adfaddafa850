// Internal to tune/: one build cache record's encoding and the file operations BuildCache needs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "ridge/tune/build_cache.h"

namespace ridge::tune::detail {

inline constexpr std::string_view kTreeName = "tune";           // <root>/tune
inline constexpr uint64_t kMaxRecordBytes = uint64_t(1) << 20;  // larger files are corrupt

struct Record {
  int format = kCacheFormatVersion;
  DeviceKey device;
  std::string kind, key, value;
  int64_t created = 0;  // Unix seconds
};

// Lowercase hex of a 64-bit value, 16 digits.
std::string hex64(uint64_t v);
// The payload the checksum covers (field order and framing in build_cache.h).
std::string canonical_payload(const Record& r);
// The record file's text (one JSON object). Throws ridge::Error when a string is not UTF-8.
std::string encode(const Record& r);

enum class Decoded { ok, corrupt, foreign_format };
// Parses a record file's text. On corrupt / foreign_format, `why` says what is wrong.
Decoded decode(std::string_view text, Record& out, std::string& why);

// Keeps [A-Za-z0-9._-], maps every other byte to '_', at most max_len bytes.
std::string file_name_safe(std::string_view s, size_t max_len);

enum class ReadStatus { ok, missing, error };
// Reads a whole file of at most kMaxRecordBytes; on error `why` holds the reason.
ReadStatus read_small_file(const std::filesystem::path& path, std::string& out, std::string& why);

// Writes `text` to `path` atomically: temp file beside it, fsync, rename, fsync of the directory.
// The new file's mtime is set to now with full clock resolution. Returns false with `why` set.
bool write_atomic(const std::filesystem::path& path, std::string_view text, std::string& why);

// Sets a file's atime and mtime to now (full clock resolution). False when it is gone.
bool touch(const std::filesystem::path& path);

// The cache touches (lists, evicts, clears) only names it makes itself, so that nothing else
// found under <root>/tune is ever removed:
// A record file name: "<file-name-safe kind, 1-40 bytes>-<16 lowercase hex>.json".
bool is_record_name(const std::string& name);
// A temp file left by write_atomic: ".<record file name>.tmp.<pid>.<lowercase hex>".
bool is_temp_name(const std::string& name);
// A device directory's name (DeviceKey::dir_name): "<file-name-safe GPU name>-<SMs>sm-<8 hex>".
bool is_device_dir_name(const std::string& name);

// Whether a file with a record name is ridge's to remove: a record (any format version), or a
// corrupt one (unreadable, too large, not JSON, or a JSON object with ridge's "format" or
// "checksum" field). A valid JSON document without them is someone else's file and is kept.
// False for anything but a regular file, and for a file that is gone.
bool is_owned_record(const std::filesystem::path& path);
bool is_owned_record_text(std::string_view text);

int64_t unix_now();

}  // namespace ridge::tune::detail
