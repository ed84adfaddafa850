// Small in-memory writers of GGUF and safetensors images for the io tests. They write exactly
// what they are told (including wrong counts, types and offsets), so tests can build both valid
// files and each kind of malformed one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ridge/core/error.h"

namespace ridge::io::testing {

using Bytes = std::vector<std::byte>;

// Appends little-endian values and GGUF strings.
class ByteSink {
 public:
  template <typename T>
  ByteSink& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  ByteSink& put_string(std::string_view s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
    return *this;
  }
  ByteSink& append(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
    return *this;
  }
  ByteSink& append(const Bytes& b) { return append(b.data(), b.size()); }
  Bytes bytes;
};

// GGUF value type numbers (as the format defines them).
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
// ggml type numbers.
enum : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ8_0 = 8, kGgmlQ4_K = 12,
  kGgmlIq2Xxs = 16, kGgmlBF16 = 30,
};

// Encoded GGUF values (type tag not included).
template <typename T>
Bytes encode(T v) {
  ByteSink s;
  s.put(v);
  return s.bytes;
}
inline Bytes encode_string(std::string_view v) {
  ByteSink s;
  s.put_string(v);
  return s.bytes;
}
// An array value: element type, count, then the already-encoded elements.
inline Bytes encode_array(uint32_t elem_type, const std::vector<Bytes>& elems,
                          std::optional<uint64_t> count = std::nullopt) {
  ByteSink s;
  s.put(elem_type).put<uint64_t>(count.value_or(elems.size()));
  for (const auto& e : elems) s.append(e);
  return s.bytes;
}

struct GgufTensorSpec {
  GgufTensorSpec(std::string name_, std::vector<uint64_t> ne_, uint32_t type_, Bytes data_,
                 std::optional<uint64_t> offset_ = std::nullopt,
                 std::optional<uint32_t> n_dims_ = std::nullopt)
      : name(std::move(name_)), ne(std::move(ne_)), type(type_), data(std::move(data_)),
        offset(offset_), n_dims(n_dims_) {}
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, written as given
  uint32_t type = kGgmlF32;
  Bytes data;                // written at the tensor's offset
  std::optional<uint64_t> offset;    // default: next aligned offset after the previous tensor
  std::optional<uint32_t> n_dims;    // default: ne.size()
};

struct GgufBuilder {
  uint32_t version = 3;
  uint32_t alignment = 32;  // used for placing data; write a general.alignment key to change it
  std::optional<uint64_t> n_kv_override, n_tensors_override;
  std::vector<std::pair<std::string, std::pair<uint32_t, Bytes>>> kvs;
  std::vector<GgufTensorSpec> tensors;

  GgufBuilder& kv(std::string key, uint32_t type, Bytes value) {
    kvs.push_back({std::move(key), {type, std::move(value)}});
    return *this;
  }
  GgufBuilder& tensor(GgufTensorSpec t) {
    tensors.push_back(std::move(t));
    return *this;
  }

  // Offset of the data section in the built image (header end, aligned).
  size_t header_bytes() const { return header().bytes.size(); }

  Bytes build() const {
    ByteSink s = header();
    if (tensors.empty()) return s.bytes;
    size_t data_start = align(s.bytes.size());
    Bytes out = s.bytes;
    out.resize(data_start, std::byte{0});
    auto offsets = tensor_offsets();
    for (size_t i = 0; i < tensors.size(); ++i) {
      // Offsets far out (tests of out-of-range tensors) are written into the header only.
      if (offsets[i] > (uint64_t(1) << 30)) continue;
      size_t at = data_start + offsets[i];
      if (out.size() < at + tensors[i].data.size()) out.resize(at + tensors[i].data.size(), std::byte{0});
      if (!tensors[i].data.empty())
        std::memcpy(out.data() + at, tensors[i].data.data(), tensors[i].data.size());
    }
    return out;
  }

 private:
  size_t align(size_t x) const { return (x + alignment - 1) / alignment * alignment; }

  std::vector<uint64_t> tensor_offsets() const {
    std::vector<uint64_t> offs;
    uint64_t next = 0;
    for (const auto& t : tensors) {
      uint64_t o = t.offset.value_or(next);
      offs.push_back(o);
      next = align(o + t.data.size());
    }
    return offs;
  }

  ByteSink header() const {
    ByteSink s;
    s.append("GGUF", 4).put(version);
    s.put<uint64_t>(n_tensors_override.value_or(tensors.size()));
    s.put<uint64_t>(n_kv_override.value_or(kvs.size()));
    for (const auto& [key, tv] : kvs) s.put_string(key).put(tv.first).append(tv.second);
    auto offs = tensor_offsets();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      s.put_string(t.name).put<uint32_t>(t.n_dims.value_or(uint32_t(t.ne.size())));
      for (uint64_t d : t.ne) s.put(d);
      s.put(t.type).put<uint64_t>(offs[i]);
    }
    return s;
  }
};

// Bytes 0, 1, 2, ... (mod 251) so that every tensor has distinct, checkable content.
inline Bytes pattern_bytes(size_t n, uint8_t seed = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = std::byte((i + seed) % 251);
  return b;
}

// A safetensors image from a header text (written as given) and a data section.
inline Bytes safetensors_image(std::string_view header, const Bytes& data,
                               std::optional<uint64_t> header_len = std::nullopt) {
  ByteSink s;
  s.put<uint64_t>(header_len.value_or(header.size()));
  s.append(header.data(), header.size());
  s.append(data);
  return s.bytes;
}

struct SafetensorsSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  Bytes data;
};

// A valid safetensors image: tensors laid out one after another in the order given.
inline Bytes safetensors_file(const std::vector<SafetensorsSpec>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  Bytes data;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';  // as the reference writer pads
  return safetensors_image(text, data);
}

// The message of the ridge::Error that fn throws; any other exception escapes (and fails the test).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ridge::Error& e) {
    return e.what();
  }
  return "<no ridge::Error thrown>";
}

}  // namespace ridge::io::testing

// Asserts that a message contains a substring, printing both when it does not.
#define EXPECT_HAS(message, part)                                               \
  EXPECT_NE(std::string(message).find(part), std::string::npos)                \
      << "message: " << (message) << "\n  expected to contain: " << (part)
