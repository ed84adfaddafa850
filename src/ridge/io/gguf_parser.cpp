// GgufFile::parse: the validating GGUF v2/v3 parser. Every read goes through Cursor, which
// checks the bytes are there before touching them; every count is bounded by the bytes left
// before anything is allocated for it.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <set>

#include "ridge/core/error.h"
#include "ridge/io/checked_math.h"
#include "ridge/io/ggml_types.h"
#include "ridge/io/gguf.h"

namespace ridge::io {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint64_t kDefaultAlignment = 32;
// Smallest encodings, used to bound counts by the bytes left: a metadata entry is at least
// {u64 key length, u32 type, 1-byte value}; a tensor info at least {u64 name length, u32 n_dims,
// one u64 dim, u32 type, u64 offset}.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint32_t kMaxDims = 4;
// Memory the parsed metadata values may take: each array element is one GgufValue (~48 bytes)
// however small its encoding, so a 16 MB file of u8 arrays would otherwise cost ~0.8 GB. Real
// files hold < 1M values (~50 MB): vocabularies of ~260k tokens in three or four arrays.
constexpr uint64_t kMaxMetadataValueBytes = uint64_t(256) << 20;

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::f64); }

// Smallest encoded size of one value of type t (arrays: element type + count).
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: case GgufType::string: return 8;
    case GgufType::array: return 12;
  }
  return 1;
}

class Cursor {
 public:
  Cursor(const std::byte* data, size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  // `field` is called only to build the error message.
  template <typename Field>
  void need(uint64_t n, Field&& field) const {
    if (n > remaining())
      fail("{}: truncated: {} needs {} bytes at offset {}, but the file has only {} left (size {})",
           file_, field(), n, pos_, remaining(), size_);
  }

  template <typename T, typename Field>
  T read(Field&& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  template <typename Field>
  std::string read_string(Field&& field) {
    uint64_t len = read<uint64_t>([&] { return fmt::format("the length of {}", field()); });
    if (len > remaining())
      fail("{}: {} has length {} at offset {}, past the end of the file ({} bytes left)", file_,
           field(), len, pos_ - 8, remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

 private:
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
};

std::string type_desc(uint32_t t) {
  return valid_type(t) ? std::string(gguf_type_name(GgufType(t))) : fmt::format("type {}", t);
}

}  // namespace

class GgufParser {
 public:
  GgufParser(const std::byte* data, size_t size, const std::string& name)
      : data_(data), size_(size), cur_(data, size, name), name_(name) {}

  GgufFile parse() {
    GgufFile f;
    f.name_ = name_;
    read_header(f);
    read_metadata(f);
    read_alignment(f);
    read_tensor_infos(f);
    place_tensors(f);
    return f;
  }

 private:
  void read_header(GgufFile& f) {
    RIDGE_CHECK(size_ >= 4, "{}: file of {} bytes is too small to be GGUF (no magic)", name_, size_);
    char magic[4];
    std::memcpy(magic, data_, 4);
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      fail("{}: bad magic {:02x} {:02x} {:02x} {:02x}, expected 'GGUF' (47 47 55 46): not a GGUF file",
           name_, uint8_t(magic[0]), uint8_t(magic[1]), uint8_t(magic[2]), uint8_t(magic[3]));
    }
    cur_.read<uint32_t>([] { return "magic"; });
    uint32_t v = cur_.read<uint32_t>([] { return "version"; });
    if (v != 2 && v != 3) {
      uint32_t swapped = __builtin_bswap32(v);
      if (swapped == 2 || swapped == 3)
        fail("{}: version {} looks like a big-endian GGUF v{}; only little-endian files are read",
             name_, v, swapped);
      fail("{}: unsupported GGUF version {}, expected 2 or 3", name_, v);
    }
    f.version_ = v;
    n_tensors_ = cur_.read<uint64_t>([] { return "tensor count (n_tensors)"; });
    n_kv_ = cur_.read<uint64_t>([] { return "metadata count (n_kv)"; });
    // The counts must fit in the rest of the file at their smallest encodings.
    auto kv_bytes = detail::checked_mul(n_kv_, kMinKvBytes);
    auto ti_bytes = detail::checked_mul(n_tensors_, kMinTensorInfoBytes);
    auto total = kv_bytes && ti_bytes ? detail::checked_add(*kv_bytes, *ti_bytes) : std::nullopt;
    if (!total || *total > cur_.remaining())
      fail("{}: header claims n_kv = {} metadata entries and n_tensors = {} tensors, which need at "
           "least {} bytes, but only {} bytes follow the header",
           name_, n_kv_, n_tensors_, total ? fmt::format("{}", *total) : std::string("2^64+"),
           cur_.remaining());
  }

  void read_metadata(GgufFile& f) {
    for (uint64_t i = 0; i < n_kv_; ++i) {
      std::string key = cur_.read_string([&] { return fmt::format("the key of metadata entry #{}", i); });
      uint32_t t = cur_.read<uint32_t>([&] { return fmt::format("the type of metadata key '{}'", key); });
      RIDGE_CHECK(valid_type(t), "{}: metadata key '{}' has value type {}, expected 0..12", name_, key, t);
      GgufValue v = read_value(GgufType(t), key, 0);
      if (f.metadata_.count(key)) fail("{}: metadata key '{}' appears twice", name_, key);
      f.metadata_.emplace(std::move(key), std::move(v));
    }
  }

  GgufValue read_value(GgufType t, const std::string& key, int depth) {
    GgufValue v;
    v.type = t;
    auto field = [&] { return fmt::format("the {} value of metadata key '{}'", gguf_type_name(t), key); };
    switch (t) {
      case GgufType::u8: v.value = uint64_t(cur_.read<uint8_t>(field)); break;
      case GgufType::u16: v.value = uint64_t(cur_.read<uint16_t>(field)); break;
      case GgufType::u32: v.value = uint64_t(cur_.read<uint32_t>(field)); break;
      case GgufType::u64: v.value = uint64_t(cur_.read<uint64_t>(field)); break;
      case GgufType::i8: v.value = int64_t(cur_.read<int8_t>(field)); break;
      case GgufType::i16: v.value = int64_t(cur_.read<int16_t>(field)); break;
      case GgufType::i32: v.value = int64_t(cur_.read<int32_t>(field)); break;
      case GgufType::i64: v.value = int64_t(cur_.read<int64_t>(field)); break;
      case GgufType::f32: v.value = double(cur_.read<float>(field)); break;
      case GgufType::f64: v.value = cur_.read<double>(field); break;
      case GgufType::boolean: {
        uint8_t b = cur_.read<uint8_t>(field);
        RIDGE_CHECK(b <= 1, "{}: metadata key '{}' is a bool with byte value {}, expected 0 or 1",
                    name_, key, b);
        v.value = b == 1;
        break;
      }
      case GgufType::string: v.value = cur_.read_string(field); break;
      case GgufType::array: v.value = read_array(v, key, depth); break;
    }
    return v;
  }

  std::vector<GgufValue> read_array(GgufValue& v, const std::string& key, int depth) {
    uint32_t et = cur_.read<uint32_t>([&] { return fmt::format("the element type of array '{}'", key); });
    RIDGE_CHECK(valid_type(et), "{}: metadata key '{}' is an array of element type {}, expected 0..12",
                name_, key, et);
    v.array_type = GgufType(et);
    uint64_t n = cur_.read<uint64_t>([&] { return fmt::format("the length of array '{}'", key); });
    if (v.array_type == GgufType::array && depth + 1 >= GgufFile::kMaxArrayDepth)
      fail("{}: metadata key '{}' nests arrays deeper than {} levels", name_, key,
           GgufFile::kMaxArrayDepth);
    uint64_t min_bytes = min_value_bytes(v.array_type);
    auto need = detail::checked_mul(n, min_bytes);
    if (!need || *need > cur_.remaining())
      fail("{}: metadata key '{}' is an array of {} {} elements, which needs at least {} bytes at "
           "offset {}, but only {} bytes are left",
           name_, key, n, type_desc(et), need ? fmt::format("{}", *need) : std::string("2^64+"),
           cur_.pos(), cur_.remaining());
    values_ += n;
    if (values_ > GgufFile::kMaxMetadataValues)
      fail("{}: metadata key '{}' brings the metadata to {} values, more than the limit of {}",
           name_, key, values_, GgufFile::kMaxMetadataValues);
    if (values_ > kMaxMetadataValueBytes / sizeof(GgufValue))
      fail(
          "{}: metadata key '{}' brings the metadata to {} values, {} MiB in memory, more than the "
          "limit of {} MiB",
          name_, key, values_, values_ * sizeof(GgufValue) >> 20, kMaxMetadataValueBytes >> 20);
    std::vector<GgufValue> items;
    items.reserve(size_t(n));  // bounded above by the bytes left
    for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(v.array_type, key, depth + 1));
    return items;
  }

  void read_alignment(GgufFile& f) {
    f.alignment_ = kDefaultAlignment;
    auto it = f.metadata_.find("general.alignment");
    if (it == f.metadata_.end()) return;
    const GgufValue& v = it->second;
    RIDGE_CHECK(v.type == GgufType::u32, "{}: metadata key 'general.alignment' has type {}, expected u32",
                name_, type_desc(uint32_t(v.type)));
    uint64_t a = std::get<uint64_t>(v.value);
    RIDGE_CHECK(detail::is_power_of_two(a),
                "{}: metadata key 'general.alignment' is {}, expected a nonzero power of two", name_, a);
    f.alignment_ = size_t(a);
  }

  void read_tensor_infos(GgufFile& f) {
    // n_tensors was bounded by the bytes left, so this reservation is too.
    f.infos_.reserve(size_t(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      GgufTensorInfo info;
      info.name = cur_.read_string([&] { return fmt::format("the name of tensor info #{}", i); });
      const std::string& tn = info.name;
      uint32_t n_dims = cur_.read<uint32_t>([&] { return fmt::format("n_dims of tensor '{}'", tn); });
      RIDGE_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: tensor '{}' has n_dims {}, expected 1..{}",
                  name_, tn, n_dims, kMaxDims);
      uint64_t ne[kMaxDims];
      uint64_t numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        ne[d] = cur_.read<uint64_t>([&] { return fmt::format("ne[{}] of tensor '{}'", d, tn); });
        RIDGE_CHECK(ne[d] > 0 && ne[d] <= uint64_t(INT64_MAX),
                    "{}: tensor '{}' has ne[{}] = {}, expected 1..{}", name_, tn, d, ne[d], INT64_MAX);
        auto p = detail::checked_mul(numel, ne[d]);
        if (!p || *p > uint64_t(INT64_MAX))
          fail("{}: tensor '{}' has {} elements (product of ne[0..{}]), more than {}", name_, tn,
               p ? fmt::format("{}", *p) : std::string("2^64+"), d, INT64_MAX);
        numel = *p;
      }
      for (uint32_t d = n_dims; d-- > 0;) info.shape.push_back(int64_t(ne[d]));

      info.ggml_type = cur_.read<uint32_t>([&] { return fmt::format("the type of tensor '{}'", tn); });
      const GgmlTypeInfo* ti = ggml_type_info(info.ggml_type);
      RIDGE_CHECK(ti, "{}: tensor '{}' has ggml type {}, which is not a ggml type this reader knows "
                  "(ridge supports {})", name_, tn, info.ggml_type, supported_ggml_types());
      RIDGE_CHECK(ne[0] % uint64_t(ti->block_elems) == 0,
                  "{}: tensor '{}' of type {} has innermost dimension ne[0] = {}, expected a multiple "
                  "of the {}-element block", name_, tn, ti->name, ne[0], ti->block_elems);
      // numel <= INT64_MAX and block_bytes <= 292, so the product fits in 64 bits unless huge.
      auto nbytes = detail::checked_mul(numel / uint64_t(ti->block_elems), uint64_t(ti->block_bytes));
      if (!nbytes)
        fail("{}: tensor '{}' of {} elements of type {} has a byte size past 2^64", name_, tn, numel,
             ti->name);
      info.nbytes = *nbytes;
      info.supported = ti->dtype.has_value();

      info.offset = cur_.read<uint64_t>([&] { return fmt::format("the data offset of tensor '{}'", tn); });
      RIDGE_CHECK(info.offset % f.alignment_ == 0,
                  "{}: tensor '{}' has data offset {}, which is not a multiple of the alignment {}",
                  name_, tn, info.offset, f.alignment_);
      if (f.info_index_.count(info.name)) fail("{}: tensor '{}' appears twice", name_, info.name);
      f.info_index_.emplace(info.name, f.infos_.size());
      f.infos_.push_back(std::move(info));
    }
  }

  void place_tensors(GgufFile& f) {
    auto start = detail::align_up(cur_.pos(), f.alignment_);
    if (f.infos_.empty()) {
      f.data_offset_ = start && *start <= size_ ? size_t(*start) : size_;
      return;
    }
    if (!start || *start > size_)
      fail("{}: the tensor data section starts at offset {} (header end {} aligned to {}), past the "
           "end of the file ({} bytes)", name_, start ? fmt::format("{}", *start) : std::string("2^64+"),
           cur_.pos(), f.alignment_, size_);
    f.data_offset_ = size_t(*start);
    const uint64_t data_size = size_ - f.data_offset_;
    for (const auto& info : f.infos_) {
      auto end = detail::checked_add(info.offset, info.nbytes);
      if (!end || *end > data_size)
        fail("{}: tensor '{}' occupies data bytes [{}, {}) ({} bytes), past the end of the data "
             "section ({} bytes, from file offset {})", name_, info.name, info.offset,
             end ? fmt::format("{}", *end) : std::string("2^64+"), info.nbytes, data_size,
             f.data_offset_);
    }
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(f.infos_.size());
    for (const auto& info : f.infos_) by_offset.push_back(&info);
    std::sort(by_offset.begin(), by_offset.end(),
              [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const auto* a = by_offset[i - 1];
      const auto* b = by_offset[i];
      if (a->offset + a->nbytes > b->offset)
        fail("{}: tensor '{}' (data bytes [{}, {})) overlaps tensor '{}' (data bytes [{}, {}))",
             name_, a->name, a->offset, a->offset + a->nbytes, b->name, b->offset,
             b->offset + b->nbytes);
    }
    f.tensors_.reserve(f.infos_.size());
    for (const auto& info : f.infos_) {
      if (!info.supported) continue;
      TensorData t;
      t.name = info.name;
      t.dtype = *ggml_type_info(info.ggml_type)->dtype;
      t.shape = info.shape;
      t.data = data_ + f.data_offset_ + info.offset;
      t.nbytes = size_t(info.nbytes);
      f.tensor_index_.emplace(t.name, f.tensors_.size());
      f.tensors_.push_back(std::move(t));
    }
  }

  const std::byte* data_;
  size_t size_;
  Cursor cur_;
  const std::string& name_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t values_ = 0;  // metadata values read so far, array elements included
};

GgufFile GgufFile::parse(const std::byte* data, size_t size, const std::string& name) {
  RIDGE_CHECK(data != nullptr || size == 0, "{}: null data", name);
  return GgufParser(data, size, name).parse();
}

GgufFile GgufFile::open(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  GgufFile f = parse(file->data(), file->size(), path);
  f.file_ = std::move(file);
  return f;
}

}  // namespace ridge::io
