// safetensors reader: one file, or a sharded set named by model.safetensors.index.json, over
// mmaps. A file is {u64 header_len, JSON header, data}; the header maps tensor names to
// {dtype, shape, data_offsets [begin, end)} relative to the data start, plus "__metadata__".
// Supported dtypes: F32, F16, BF16 (others are refused naming the tensor and the dtype).
// Every offset, size and shape is validated; overlapping or out-of-file ranges are errors.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/io/mapped_file.h"
#include "ridge/io/tensor_data.h"

namespace ridge::io {

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // In-memory image (fuzzer, tests); bytes must outlive the object.
  static SafetensorsFile parse(const std::byte* data, size_t size, const std::string& name);

  const std::vector<TensorData>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return name_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  std::vector<TensorData> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model folder: config.json, model.safetensors or the shards listed in
// model.safetensors.index.json (every listed shard must exist and hold the tensors it is said to).
class SafetensorsModel {
 public:
  // `path`: the folder, or a single .safetensors file (then config.json is read beside it).
  static SafetensorsModel open(const std::string& path);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }  // config.json
  const std::vector<const TensorData*>& tensors() const { return all_; }
  const TensorData* find_tensor(std::string_view name) const;
  const TensorData& tensor(std::string_view name) const;  // throws naming the tensor

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::vector<const TensorData*> all_;
  std::map<std::string, const TensorData*, std::less<>> index_;
};

// Reads and parses a JSON file; errors name the file and the parse position.
nlohmann::json read_json_file(const std::string& path);

}  // namespace ridge::io
