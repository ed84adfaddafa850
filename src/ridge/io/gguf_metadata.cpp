// GgufValue conversions and GgufFile's metadata and tensor lookups.
#include <cstdint>
#include <limits>

#include "ridge/core/error.h"
#include "ridge/io/ggml_types.h"
#include "ridge/io/gguf.h"

namespace ridge::io {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "unknown";
}

namespace {

std::string describe(const GgufValue& v) {
  if (!v.is_array()) return std::string(gguf_type_name(v.type));
  return fmt::format("array of {}", gguf_type_name(v.array_type));
}

}  // namespace

int64_t GgufValue::as_int(std::string_view key) const {
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    RIDGE_CHECK(*u <= uint64_t(std::numeric_limits<int64_t>::max()),
                "metadata key '{}' holds {} {}, which does not fit in int64", key,
                gguf_type_name(type), *u);
    return int64_t(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  fail("metadata key '{}' holds {}, expected an integer", key, describe(*this));
}

double GgufValue::as_float(std::string_view key) const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  // Integers are accepted where a float is asked for (e.g. a rope base written as u32).
  if (const auto* u = std::get_if<uint64_t>(&value)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return double(*i);
  fail("metadata key '{}' holds {}, expected a number", key, describe(*this));
}

bool GgufValue::as_bool(std::string_view key) const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  fail("metadata key '{}' holds {}, expected bool", key, describe(*this));
}

const std::string& GgufValue::as_string(std::string_view key) const {
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  fail("metadata key '{}' holds {}, expected string", key, describe(*this));
}

const std::vector<GgufValue>& GgufValue::as_array(std::string_view key) const {
  if (const auto* a = std::get_if<std::vector<GgufValue>>(&value)) return *a;
  fail("metadata key '{}' holds {}, expected an array", key, describe(*this));
}

// ---------------------------------------------------------------- GgufFile lookups

bool GgufFile::has(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {

const GgufValue& require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) fail("{}: metadata key '{}' is missing", f.path(), key);
  return *v;
}

// Runs a conversion; on failure, puts the file name in front of the message.
template <typename Fn>
auto in_file(const GgufFile& f, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", f.path(), e.what()));
  }
}

template <typename T, typename Convert>
std::vector<T> array_of(const GgufFile& f, std::string_view key, Convert&& convert) {
  const GgufValue& v = require(f, key);
  return in_file(f, [&] {
    const auto& items = v.as_array(key);
    std::vector<T> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      try {
        out.push_back(convert(items[i]));
      } catch (const Error& e) {
        fail("{} (element {})", e.what(), i);
      }
    }
    return out;
  });
}

}  // namespace

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  return in_file(*this, [&] { return v.as_int(key); });
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  return in_file(*this, [&] { return v.as_float(key); });
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  return in_file(*this, [&] { return v.as_bool(key); });
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  return in_file(*this, [&]() -> const std::string& { return v.as_string(key); });
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  return array_of<std::string>(*this, key, [&](const GgufValue& e) { return e.as_string(key); });
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  return array_of<int64_t>(*this, key, [&](const GgufValue& e) { return e.as_int(key); });
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  return array_of<float>(*this, key, [&](const GgufValue& e) { return float(e.as_float(key)); });
}

std::optional<int64_t> GgufFile::try_int(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}

std::optional<double> GgufFile::try_float(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}

std::optional<bool> GgufFile::try_bool(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}

std::optional<std::string> GgufFile::try_string(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

const GgufTensorInfo* GgufFile::find_tensor_info(std::string_view name) const {
  auto it = info_index_.find(name);
  return it == info_index_.end() ? nullptr : &infos_[it->second];
}

const TensorData* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it != tensor_index_.end()) return &tensors_[it->second];
  if (const GgufTensorInfo* info = find_tensor_info(name)) {
    const GgmlTypeInfo* ti = ggml_type_info(info->ggml_type);
    fail("{}: tensor '{}' has ggml type {} ({}), which ridge does not support (supported: {})",
         name_, name, info->ggml_type, ti ? ti->name : "unknown", supported_ggml_types());
  }
  return nullptr;
}

const TensorData& GgufFile::tensor(std::string_view name) const {
  if (const TensorData* t = find_tensor(name)) return *t;
  fail("{}: tensor '{}' is not in the file ({} tensors)", name_, name, infos_.size());
}

}  // namespace ridge::io
