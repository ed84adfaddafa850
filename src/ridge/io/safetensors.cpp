// SafetensorsFile: the validating single-file reader.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include "ridge/core/error.h"
#include "ridge/io/checked_math.h"
#include "ridge/io/safetensors.h"

namespace ridge::io {

namespace {

struct SafetensorsDType {
  std::string_view name;
  uint64_t bytes;
  std::optional<DType> dtype;  // set when ridge supports it
};

// The whole-byte dtypes of the safetensors format.
constexpr SafetensorsDType kDTypes[] = {
    {"F32", 4, DType::f32}, {"F16", 2, DType::f16}, {"BF16", 2, DType::bf16},
    {"F64", 8, {}},         {"I64", 8, {}},         {"U64", 8, {}},
    {"I32", 4, {}},         {"U32", 4, {}},         {"I16", 2, {}},
    {"U16", 2, {}},         {"I8", 1, {}},          {"U8", 1, {}},
    {"BOOL", 1, {}},        {"F8_E4M3", 1, {}},     {"F8_E5M2", 1, {}},
    {"F8_E8M0", 1, {}},     {"C64", 8, {}},
};

const SafetensorsDType* find_dtype(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

// Deepest JSON nesting a valid header has is 3 ({"t": {"shape": [..]}}); much deeper input is
// refused before it can stress recursive code.
constexpr int kMaxJsonDepth = 16;

// Parses the header, refusing duplicate keys in any object and excessive nesting.
nlohmann::json parse_header(const char* begin, const char* end, const std::string& file) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxJsonDepth)
      fail("{}: header JSON nests deeper than {} levels", file, kMaxJsonDepth);
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end && !keys.empty()) keys.pop_back();
    if (event == E::key && !keys.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) fail("{}: header JSON has key '{}' twice", file, k);
    }
    return true;
  };
  try {
    return nlohmann::json::parse(begin, end, callback);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: header is not valid JSON (error at header byte {}, file offset {}): {}", file, e.byte,
         e.byte + 8, e.what());
  } catch (const nlohmann::json::exception& e) {
    // Not only parse_error: a number too large for a double (1e400) is out_of_range.406.
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
}

uint64_t read_unsigned(const nlohmann::json& j, const std::string& file, const std::string& tensor,
                       std::string_view field) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
    fail("{}: tensor '{}' has {} element {}, expected a non-negative integer", file, tensor, field,
         j.dump());
  return j.get<uint64_t>();
}

}  // namespace

class SafetensorsParser {
 public:
  SafetensorsParser(const std::byte* data, size_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  SafetensorsFile parse() {
    SafetensorsFile f;
    f.name_ = name_;
    RIDGE_CHECK(size_ >= 8, "{}: file of {} bytes is too small for the 8-byte header length", name_,
                size_);
    uint64_t header_len;
    std::memcpy(&header_len, data_, 8);
    RIDGE_CHECK(header_len <= SafetensorsFile::kMaxHeaderBytes,
                "{}: header length {} is more than the limit of {} bytes", name_, header_len,
                SafetensorsFile::kMaxHeaderBytes);
    RIDGE_CHECK(header_len <= size_ - 8,
                "{}: header length {} runs past the end of the file ({} bytes after the length)",
                name_, header_len, size_ - 8);
    RIDGE_CHECK(header_len >= 2, "{}: header length {} is too short for a JSON object", name_,
                header_len);
    const char* h = reinterpret_cast<const char*>(data_ + 8);
    RIDGE_CHECK(h[0] == '{', "{}: header starts with byte 0x{:02x}, expected '{{'", name_, uint8_t(h[0]));
    nlohmann::json header = parse_header(h, h + header_len, name_);
    RIDGE_CHECK(header.is_object(), "{}: header is JSON {}, expected an object", name_,
                header.type_name());

    f.data_offset_ = size_t(8 + header_len);
    const uint64_t data_size = size_ - f.data_offset_;
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        read_metadata(f, value);
        continue;
      }
      f.infos_.push_back(read_entry(key, value, data_size));
    }
    std::sort(f.infos_.begin(), f.infos_.end(), [](const auto& a, const auto& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    // Ranges are sorted by start; an empty range overlaps nothing.
    const SafetensorsTensorInfo* prev = nullptr;
    for (const auto& info : f.infos_) {
      if (info.begin == info.end) continue;
      if (prev && prev->end > info.begin)
        fail("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' (data_offsets [{}, {}])",
             name_, prev->name, prev->begin, prev->end, info.name, info.begin, info.end);
      prev = &info;
    }
    for (size_t i = 0; i < f.infos_.size(); ++i) {
      const auto& info = f.infos_[i];
      f.info_index_.emplace(info.name, i);
      if (!info.supported) continue;
      TensorData t;
      t.name = info.name;
      t.dtype = *find_dtype(info.dtype)->dtype;
      t.shape = info.shape;
      t.data = data_ + f.data_offset_ + info.begin;
      t.nbytes = size_t(info.end - info.begin);
      f.tensor_index_.emplace(t.name, f.tensors_.size());
      f.tensors_.push_back(std::move(t));
    }
    return f;
  }

 private:
  void read_metadata(SafetensorsFile& f, const nlohmann::json& value) {
    RIDGE_CHECK(value.is_object(), "{}: '__metadata__' is JSON {}, expected an object of strings",
                name_, value.type_name());
    for (const auto& [k, v] : value.items()) {
      RIDGE_CHECK(v.is_string(), "{}: '__metadata__' key '{}' is JSON {}, expected a string", name_,
                  k, v.type_name());
      f.metadata_.emplace(k, v.get<std::string>());
    }
  }

  SafetensorsTensorInfo read_entry(const std::string& key, const nlohmann::json& value,
                                   uint64_t data_size) {
    SafetensorsTensorInfo info;
    info.name = key;
    RIDGE_CHECK(value.is_object(), "{}: tensor '{}' is JSON {}, expected an object", name_, key,
                value.type_name());
    auto field = [&](const char* name) -> const nlohmann::json& {
      auto it = value.find(name);
      if (it == value.end()) fail("{}: tensor '{}' has no '{}'", name_, key, name);
      return *it;
    };

    const auto& dtype = field("dtype");
    RIDGE_CHECK(dtype.is_string(), "{}: tensor '{}' has dtype {}, expected a string", name_, key,
                dtype.dump());
    info.dtype = dtype.get<std::string>();
    const SafetensorsDType* dt = find_dtype(info.dtype);
    RIDGE_CHECK(dt, "{}: tensor '{}' has dtype '{}', which this reader does not know (ridge "
                "supports F32, F16, BF16)", name_, key, info.dtype);
    info.supported = dt->dtype.has_value();

    const auto& shape = field("shape");
    RIDGE_CHECK(shape.is_array(), "{}: tensor '{}' has shape {}, expected an array", name_, key,
                shape.dump());
    uint64_t numel = 1;
    for (const auto& d : shape) {
      uint64_t n = read_unsigned(d, name_, key, "shape");
      auto p = detail::checked_mul(numel, n);
      if (!p || *p > uint64_t(INT64_MAX) || n > uint64_t(INT64_MAX))
        fail("{}: tensor '{}' has shape {} with more than {} elements", name_, key, shape.dump(),
             INT64_MAX);
      numel = *p;
      info.shape.push_back(int64_t(n));
    }

    const auto& offsets = field("data_offsets");
    RIDGE_CHECK(offsets.is_array() && offsets.size() == 2,
                "{}: tensor '{}' has data_offsets {}, expected [begin, end]", name_, key,
                offsets.dump());
    info.begin = read_unsigned(offsets[0], name_, key, "data_offsets");
    info.end = read_unsigned(offsets[1], name_, key, "data_offsets");
    RIDGE_CHECK(info.begin <= info.end, "{}: tensor '{}' has data_offsets [{}, {}] with begin > end",
                name_, key, info.begin, info.end);
    RIDGE_CHECK(info.end <= data_size,
                "{}: tensor '{}' has data_offsets [{}, {}] past the end of the data section ({} bytes)",
                name_, key, info.begin, info.end, data_size);
    auto nbytes = detail::checked_mul(numel, dt->bytes);
    if (!nbytes || *nbytes != info.end - info.begin)
      fail("{}: tensor '{}' of dtype {} and shape {} needs {} bytes, but data_offsets [{}, {}] hold {}",
           name_, key, info.dtype, shape.dump(),
           nbytes ? fmt::format("{}", *nbytes) : std::string("2^64+"), info.begin, info.end,
           info.end - info.begin);
    return info;
  }

  const std::byte* data_;
  size_t size_;
  const std::string& name_;
};

SafetensorsFile SafetensorsFile::parse(const std::byte* data, size_t size, const std::string& name) {
  RIDGE_CHECK(data != nullptr || size == 0, "{}: null data", name);
  return SafetensorsParser(data, size, name).parse();
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  SafetensorsFile f = parse(file->data(), file->size(), path);
  f.file_ = std::move(file);
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor_info(std::string_view name) const {
  auto it = info_index_.find(name);
  return it == info_index_.end() ? nullptr : &infos_[it->second];
}

const TensorData* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it != tensor_index_.end()) return &tensors_[it->second];
  if (const SafetensorsTensorInfo* info = find_tensor_info(name))
    fail("{}: tensor '{}' has dtype {}, which ridge does not support (supported: F32, F16, BF16)",
         name_, name, info->dtype);
  return nullptr;
}

const TensorData& SafetensorsFile::tensor(std::string_view name) const {
  if (const TensorData* t = find_tensor(name)) return *t;
  fail("{}: tensor '{}' is not in the file ({} tensors)", name_, name, infos_.size());
}

}  // namespace ridge::io
