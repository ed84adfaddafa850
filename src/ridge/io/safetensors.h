// safetensors reader: one file, or a sharded set named by model.safetensors.index.json, over
// mmaps. A file is {u64 header_len, JSON header, data}; the header maps tensor names to
// {dtype, shape, data_offsets [begin, end)} relative to the data start, plus "__metadata__".
// Supported dtypes: F32, F16, BF16 (others are refused naming the tensor and the dtype).
// Every offset, size and shape is validated; overlapping or out-of-file ranges are errors.
//
// Refusal of other dtypes happens when the tensor is asked for, not at open: a tensor of a dtype
// the format defines with a whole-byte size (I64, U8, F64, F8_E4M3, ...) has its layout validated
// like any other, is listed in tensor_infos() with supported == false and left out of tensors();
// tensor(name) and find_tensor(name) on it throw naming the tensor and its dtype. (So a checkpoint with, say, an I64
// buffer beside its weights still opens.) A dtype string the reader does not know is an error
// at open. Shapes of any rank are read; TensorData::view() refuses rank > 4. Duplicate JSON keys
// are refused; gaps between tensors' data are allowed (the reference writer leaves none). Tensor
// data is only as aligned as the file makes it (the reference writer pads the header to 8).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/io/mapped_file.h"
#include "ridge/io/tensor_data.h"

namespace ridge::io {

// One header entry as the file states it.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // as written: "BF16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;          // data_offsets, relative to the start of the data section
  uint64_t end = 0;
  bool supported = false;      // F32, F16 or BF16
};

class SafetensorsFile {
 public:
  // The JSON header may be at most this long (and no longer than the file).
  static constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

  static SafetensorsFile open(const std::string& path);
  // In-memory image (fuzzer, tests); bytes must outlive the object.
  static SafetensorsFile parse(const std::byte* data, size_t size, const std::string& name);

  // Tensors of supported dtypes, in data order.
  const std::vector<TensorData>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return name_; }
  // Absolute file offset of the data section (8 + header length).
  size_t data_offset() const { return data_offset_; }
  // Every header entry (supported or not), in data order.
  const std::vector<SafetensorsTensorInfo>& tensor_infos() const { return infos_; }
  const SafetensorsTensorInfo* find_tensor_info(std::string_view name) const;
  // nullptr when absent; throws naming the tensor and its dtype when it is present but of an
  // unsupported dtype (so an optional weight is never silently taken as missing).
  const TensorData* find_tensor(std::string_view name) const;
  // Throws naming the tensor when absent, or naming it and its dtype when unsupported.
  const TensorData& tensor(std::string_view name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  std::vector<TensorData> tensors_;
  std::map<std::string, std::string> metadata_;
  size_t data_offset_ = 0;
  std::vector<SafetensorsTensorInfo> infos_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
  std::map<std::string, size_t, std::less<>> info_index_;    // name -> index in infos_

  friend class SafetensorsParser;
};

// A Hugging Face model folder: config.json, model.safetensors or the shards listed in
// model.safetensors.index.json (every listed shard must exist and hold the tensors it is said to).
// A tensor listed in a shard but of an unsupported dtype is refused by tensor(name), naming it.
// Tensor names must be unique across shards; a shard named in the index must be a plain file
// name inside the folder.
class SafetensorsModel {
 public:
  // `path`: the folder, a single .safetensors file, or a *.safetensors.index.json file (then
  // config.json is read beside it). config.json is required.
  static SafetensorsModel open(const std::string& path);

  SafetensorsModel() = default;
  // Move-only: tensors() and the index point into files_.
  SafetensorsModel(SafetensorsModel&&) noexcept = default;
  SafetensorsModel& operator=(SafetensorsModel&&) noexcept = default;
  SafetensorsModel(const SafetensorsModel&) = delete;
  SafetensorsModel& operator=(const SafetensorsModel&) = delete;

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }  // config.json
  const std::vector<const TensorData*>& tensors() const { return all_; }
  // nullptr when absent; throws naming the dtype when present but unsupported.
  const TensorData* find_tensor(std::string_view name) const;
  const TensorData& tensor(std::string_view name) const;  // throws naming the tensor
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::vector<const TensorData*> all_;
  std::map<std::string, const TensorData*, std::less<>> index_;
};

// Reads and parses a JSON file; errors name the file and the parse position. Only regular files
// are read, and JSON nested deeper than 64 levels is refused while parsing.
nlohmann::json read_json_file(const std::string& path);
// A JSON value for an error message: scalars as written (cut to 64 characters), containers by
// their type, so that a message never walks (or prints) a large or deep value.
std::string describe_json(const nlohmann::json& value);

}  // namespace ridge::io
