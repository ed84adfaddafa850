// ridge_io_dump: prints, as JSON, what ridge's io readers read from a model file, so that the
// parity test can compare it with the reference Python readers (gguf, safetensors).
//
//   ridge_io_dump gguf FILE          metadata (type + value), tensor infos, CRC-32 of tensor bytes
//   ridge_io_dump safetensors FILE   __metadata__, tensor infos, CRC-32 of tensor bytes
//   ridge_io_dump model PATH         a Hugging Face folder: config, files, tensors
//   ridge_io_dump dequant FILE OUT [--reference]
//                                    every tensor of a GGUF file ridge computes with, converted
//                                    to fp32 by the CPU backend (dequantize_row, or with
//                                    --reference dequantize_row_reference), written to OUT as raw
//                                    little-endian float32 in file order; prints the tensors'
//                                    names, types and element counts as JSON
//
// CRC-32 is zlib's (reflected polynomial 0xEDB88320), so Python checks it with zlib.crc32.
// On a ridge::Error the message goes to stderr and the exit status is 1.
#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "ridge/backend/cpu/quant.h"
#include "ridge/core/error.h"
#include "ridge/io/ggml_types.h"
#include "ridge/io/gguf.h"
#include "ridge/io/safetensors.h"

namespace {

using nlohmann::json;
using namespace ridge::io;

uint32_t crc32(const std::byte* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ uint8_t(data[i])) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

json value_json(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<GgufValue>>) {
          json a = json::array();
          for (const auto& e : x) a.push_back(value_json(e));
          return a;
        } else {
          return json(x);
        }
      },
      v.value);
}

json gguf_json(const std::string& path) {
  GgufFile f = GgufFile::open(path);
  json out = {{"format", "gguf"},          {"path", f.path()},
              {"version", f.version()},     {"alignment", f.alignment()},
              {"data_offset", f.data_offset()}};
  json meta = json::object();
  for (const auto& [key, v] : f.metadata()) {
    json m = {{"type", gguf_type_name(v.type)}, {"value", value_json(v)}};
    if (v.is_array()) m["array_type"] = gguf_type_name(v.array_type);
    meta[key] = std::move(m);
  }
  out["metadata"] = std::move(meta);

  // Unsupported tensors are not in tensors(): their bytes are read through a mapping of our own.
  MappedFile raw(path);
  json tensors = json::array();
  for (const auto& info : f.tensor_infos()) {
    const GgmlTypeInfo* ti = ggml_type_info(info.ggml_type);
    json t = {{"name", info.name},
              {"ggml_type", info.ggml_type},
              {"ggml_type_name", ti ? ti->name : "?"},
              {"shape", info.shape},
              {"offset", info.offset},
              {"nbytes", info.nbytes},
              {"supported", info.supported}};
    if (info.supported) {
      const ridge::io::TensorData& td = f.tensor(info.name);
      t["dtype"] = ridge::dtype_name(td.dtype);
      t["crc32"] = crc32(td.data, td.nbytes);
      ridge::Tensor view = td.view();
      t["view"] = view.describe();
    } else {
      t["crc32"] = crc32(raw.data() + f.data_offset() + info.offset, size_t(info.nbytes));
    }
    tensors.push_back(std::move(t));
  }
  out["tensors"] = std::move(tensors);
  return out;
}

json tensor_json(const TensorData& t) {
  return {{"name", t.name},
          {"dtype", ridge::dtype_name(t.dtype)},
          {"shape", t.shape},
          {"nbytes", t.nbytes},
          {"crc32", crc32(t.data, t.nbytes)}};
}

json safetensors_json(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  json out = {{"format", "safetensors"}, {"path", f.path()}, {"data_offset", f.data_offset()},
              {"metadata", f.metadata()}};
  json tensors = json::array();
  for (const auto& info : f.tensor_infos()) {
    json t = {{"name", info.name},   {"file_dtype", info.dtype}, {"shape", info.shape},
              {"begin", info.begin}, {"end", info.end},          {"supported", info.supported}};
    if (info.supported) {
      json d = tensor_json(f.tensor(info.name));
      t["dtype"] = d["dtype"];
      t["crc32"] = d["crc32"];
    }
    tensors.push_back(std::move(t));
  }
  out["tensors"] = std::move(tensors);
  return out;
}

json model_json(const std::string& path) {
  SafetensorsModel m = SafetensorsModel::open(path);
  json out = {{"format", "model"}, {"dir", m.dir()}, {"config", m.config()}};
  json files = json::array();
  for (const auto& f : m.files()) files.push_back(f.path());
  out["files"] = std::move(files);
  json tensors = json::array();
  for (const TensorData* t : m.tensors()) tensors.push_back(tensor_json(*t));
  out["tensors"] = std::move(tensors);
  return out;
}

json dequant_json(const std::string& path, const std::string& out_path, bool reference) {
  GgufFile f = GgufFile::open(path);
  std::FILE* out = std::fopen(out_path.c_str(), "wb");
  RIDGE_CHECK(out != nullptr, "cannot write {}", out_path);
  json tensors = json::array();
  std::vector<float> row;
  for (const auto& info : f.tensor_infos()) {
    if (!info.supported) continue;
    const TensorData& td = f.tensor(info.name);
    const ridge::Tensor v = td.view();
    const int64_t n = v.numel(), cols = v.ndim == 0 ? 1 : v.shape[v.ndim - 1];
    row.resize(size_t(cols));
    for (int64_t r = 0; r < n / std::max<int64_t>(cols, 1); ++r) {
      const auto* src = reinterpret_cast<const char*>(td.data) + r * ridge::row_bytes(td.dtype, cols);
      if (reference)
        ridge::backend::cpu::dequantize_row_reference(td.dtype, src, row.data(), cols);
      else
        ridge::backend::cpu::dequantize_row(td.dtype, src, row.data(), cols);
      RIDGE_CHECK(std::fwrite(row.data(), 4, row.size(), out) == row.size(), "short write to {}",
                  out_path);
    }
    tensors.push_back({{"name", info.name}, {"dtype", ridge::dtype_name(td.dtype)}, {"numel", n}});
  }
  RIDGE_CHECK(std::fclose(out) == 0, "cannot close {}", out_path);
  return {{"tensors", tensors}};
}

int usage() {
  std::cerr << "usage: ridge_io_dump gguf|safetensors|model PATH\n"
               "       ridge_io_dump dequant FILE OUT [--reference]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string kind = argv[1];
  const std::string path = argv[2];
  if (kind == "dequant" ? !(argc == 4 || (argc == 5 && std::string(argv[4]) == "--reference"))
                        : argc != 3)
    return usage();
  try {
    json out;
    if (kind == "dequant") {
      out = dequant_json(path, argv[3], argc == 5);
    } else if (kind == "gguf") {
      out = gguf_json(path);
    } else if (kind == "safetensors") {
      out = safetensors_json(path);
    } else if (kind == "model") {
      out = model_json(path);
    } else {
      return usage();
    }
    // Bytes that are not UTF-8 (allowed in GGUF strings) are replaced rather than refused.
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  } catch (const ridge::Error& e) {
    std::cerr << "ridge_io_dump: error: " << e.what() << "\n";
    return 1;
  }
}
