// GGUF reader (versions 2 and 3), over an mmap of the file.
// Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv metadata entries
// {string key, u32 type, value}, then n_tensors infos {string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml_type, u64 offset}, then padding to `general.alignment` (default 32), then tensor data
// (each offset relative to the data start, aligned). Strings are {u64 length, bytes}.
// Every count, length, offset and dimension is validated against the file size; a bad file
// throws ridge::Error naming the file, the field and the bad value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ridge/io/mapped_file.h"
#include "ridge/io/tensor_data.h"

namespace ridge::io {

enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// A metadata value. Arrays hold a single element type (nested arrays are allowed by the format
// and kept as nested GgufValue).
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType array_type = GgufType::u8;  // for arrays
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> value;

  bool is_array() const { return type == GgufType::array; }
  // Conversions; each throws ridge::Error naming the key if the stored type does not fit.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  const std::vector<GgufValue>& as_array(std::string_view key) const;
};

class GgufFile {
 public:
  // Opens and validates; throws ridge::Error on any bad field.
  static GgufFile open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests); `name` stands for the path in errors.
  // The bytes must outlive the GgufFile.
  static GgufFile parse(const std::byte* data, size_t size, const std::string& name);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  bool has(std::string_view key) const;
  const GgufValue* find(std::string_view key) const;
  // Typed getters: throw ridge::Error naming the key when missing or of the wrong type.
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  // Optional getters: nullopt when missing; throw when present with the wrong type.
  std::optional<int64_t> try_int(std::string_view key) const;
  std::optional<double> try_float(std::string_view key) const;
  std::optional<bool> try_bool(std::string_view key) const;
  std::optional<std::string> try_string(std::string_view key) const;

  const std::vector<TensorData>& tensors() const { return tensors_; }
  const TensorData* find_tensor(std::string_view name) const;
  const TensorData& tensor(std::string_view name) const;  // throws naming the tensor

 private:
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::string name_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<TensorData> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace ridge::io
