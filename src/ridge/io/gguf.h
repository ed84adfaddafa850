// GGUF reader (versions 2 and 3), over an mmap of the file.
// Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv metadata entries
// {string key, u32 type, value}, then n_tensors infos {string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml_type, u64 offset}, then padding to `general.alignment` (default 32), then tensor data
// (each offset relative to the data start, aligned). Strings are {u64 length, bytes}.
// Every count, length, offset and dimension is validated against the file size; a bad file
// throws ridge::Error naming the file, the field and the bad value.
//
// Tensors of ggml types ridge cannot compute with (K-quants, IQ*, integers, F64, ...) do not make
// the file unreadable: their layout is validated like any other tensor's (sizes, alignment,
// overlap), they are listed in tensor_infos() with supported == false, they are left out of
// tensors(), and tensor(name) or find_tensor(name) on one throws naming the tensor and its type
// (find_tensor_info() probes without throwing). So the metadata
// (e.g. a tokenizer) of such a file can still be read. A type number ggml does not define at all
// is an error at open, naming the tensor and the number.
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
  // as_int takes any integer type (a u64 above INT64_MAX does not fit); as_float takes f32, f64
  // and integers; as_bool only bool; as_string only string; as_array only arrays.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  const std::vector<GgufValue>& as_array(std::string_view key) const;
};

// One tensor info record as the file states it (every tensor, supported or not, in file order).
struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<int64_t> shape;  // outermost first (ne[] reversed)
  uint64_t offset = 0;         // relative to the start of the tensor data section
  uint64_t nbytes = 0;
  bool supported = false;      // ggml type maps to a ridge DType
};

class GgufFile {
 public:
  // Limits beyond the format's own: a file past them is refused rather than allowed to make the
  // reader allocate without bound. Nested arrays deeper than this are refused (stack depth).
  static constexpr int kMaxArrayDepth = 8;
  // Total metadata values (array elements included); real vocabularies hold < 1M.
  static constexpr uint64_t kMaxMetadataValues = uint64_t(1) << 24;

  // Opens and validates; throws ridge::Error on any bad field.
  static GgufFile open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests); `name` stands for the path in errors.
  // The bytes must outlive the GgufFile.
  static GgufFile parse(const std::byte* data, size_t size, const std::string& name);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  // Absolute file offset where the tensor data section starts (the header end, aligned).
  size_t data_offset() const { return data_offset_; }

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

  // Tensors of supported types, in file order.
  const std::vector<TensorData>& tensors() const { return tensors_; }
  // nullptr when absent; throws naming the tensor and its ggml type when it is present but of an
  // unsupported type (so an optional weight is never silently taken as missing).
  const TensorData* find_tensor(std::string_view name) const;
  // Throws naming the tensor when absent, or naming it and its ggml type when unsupported.
  const TensorData& tensor(std::string_view name) const;
  // Every tensor info of the file, in file order, supported or not.
  const std::vector<GgufTensorInfo>& tensor_infos() const { return infos_; }
  const GgufTensorInfo* find_tensor_info(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> file_;  // null when parsed from memory
  std::string name_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<TensorData> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
  std::vector<GgufTensorInfo> infos_;
  std::map<std::string, size_t, std::less<>> info_index_;  // name -> index in infos_

  friend class GgufParser;
};

}  // namespace ridge::io
