// GGUF reader: round trips of every metadata and tensor type, then one test per kind of
// malformed file, each checking that the message names the bad field.
#include "ridge/io/gguf.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ridge/core/half.h"
#include "ridge/io/ggml_types.h"
#include "io/test_writers.h"

namespace ridge::io {
namespace {

using namespace ridge::io::testing;

GgufFile parse(const Bytes& b, const std::string& name = "test.gguf") {
  return GgufFile::parse(b.data(), b.size(), name);
}

std::string parse_error(const Bytes& b) {
  return error_of([&] { parse(b, "bad.gguf"); });
}

Bytes f32_bytes(const std::vector<float>& v) {
  ByteSink s;
  for (float x : v) s.put(x);
  return s.bytes;
}

// A small file holding every metadata type (nested arrays included) and every supported tensor
// type. Tensor data is a byte pattern: the reader does not look inside blocks.
GgufBuilder every_type_file() {
  GgufBuilder b;
  b.kv("general.architecture", kString, encode_string("llama"))
      .kv("v.u8", kU8, encode<uint8_t>(200))
      .kv("v.i8", kI8, encode<int8_t>(-100))
      .kv("v.u16", kU16, encode<uint16_t>(60000))
      .kv("v.i16", kI16, encode<int16_t>(-30000))
      .kv("v.u32", kU32, encode<uint32_t>(4000000000u))
      .kv("v.i32", kI32, encode<int32_t>(-2000000000))
      .kv("v.f32", kF32, encode<float>(0.15625f))
      .kv("v.bool", kBool, encode<uint8_t>(1))
      .kv("v.string", kString, encode_string("héllo \"world\""))
      .kv("v.u64", kU64, encode<uint64_t>(18000000000000000000ull))
      .kv("v.i64", kI64, encode<int64_t>(-9000000000000000000ll))
      .kv("v.f64", kF64, encode<double>(-2.5e-300))
      .kv("a.u8", kArray, encode_array(kU8, {encode<uint8_t>(1), encode<uint8_t>(255)}))
      .kv("a.i8", kArray, encode_array(kI8, {encode<int8_t>(-128), encode<int8_t>(127)}))
      .kv("a.u16", kArray, encode_array(kU16, {encode<uint16_t>(65535)}))
      .kv("a.i16", kArray, encode_array(kI16, {encode<int16_t>(-32768)}))
      .kv("a.u32", kArray, encode_array(kU32, {encode<uint32_t>(7), encode<uint32_t>(8)}))
      .kv("a.i32", kArray, encode_array(kI32, {encode<int32_t>(-1), encode<int32_t>(2), encode<int32_t>(3)}))
      .kv("a.f32", kArray, encode_array(kF32, {encode<float>(1.5f), encode<float>(-0.25f)}))
      .kv("a.bool", kArray, encode_array(kBool, {encode<uint8_t>(0), encode<uint8_t>(1)}))
      .kv("a.string", kArray, encode_array(kString, {encode_string("a"), encode_string(""), encode_string("ccc")}))
      .kv("a.u64", kArray, encode_array(kU64, {encode<uint64_t>(1ull << 40)}))
      .kv("a.i64", kArray, encode_array(kI64, {encode<int64_t>(-(1ll << 40))}))
      .kv("a.f64", kArray, encode_array(kF64, {encode<double>(3.25)}))
      .kv("a.empty", kArray, encode_array(kF32, {}))
      .kv("a.nested", kArray,
          encode_array(kArray, {encode_array(kI32, {encode<int32_t>(1), encode<int32_t>(2)}),
                                encode_array(kI32, {}),
                                encode_array(kI32, {encode<int32_t>(3)})}))
      .kv("a.nested_strings", kArray,
          encode_array(kArray, {encode_array(kString, {encode_string("x"), encode_string("yz")})}));
  b.tensor({"t.f32", {3, 2}, kGgmlF32, f32_bytes({1, 2, 3, 4, 5, 6})})
      .tensor({"t.f16", {4}, kGgmlF16, pattern_bytes(8, 1)})
      .tensor({"t.bf16", {2, 1, 3}, kGgmlBF16, pattern_bytes(12, 2)})
      .tensor({"t.q8_0", {64, 2}, kGgmlQ8_0, pattern_bytes(4 * 34, 3)})
      .tensor({"t.q4_0", {32, 3, 1, 2}, kGgmlQ4_0, pattern_bytes(6 * 18, 4)})
      .tensor({"t.q4_1", {96}, kGgmlQ4_1, pattern_bytes(3 * 20, 5)});
  return b;
}

TEST(Gguf, RoundTripsEveryMetadataType) {
  Bytes img = every_type_file().build();
  GgufFile f = parse(img);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.path(), "test.gguf");
  EXPECT_EQ(f.metadata().size(), 28u);

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("v.u8"), 200);
  EXPECT_EQ(f.get_int("v.i8"), -100);
  EXPECT_EQ(f.get_int("v.u16"), 60000);
  EXPECT_EQ(f.get_int("v.i16"), -30000);
  EXPECT_EQ(f.get_int("v.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("v.i32"), -2000000000);
  EXPECT_EQ(f.get_float("v.f32"), 0.15625);
  EXPECT_EQ(f.get_bool("v.bool"), true);
  EXPECT_EQ(f.get_string("v.string"), "héllo \"world\"");
  EXPECT_EQ(std::get<uint64_t>(f.find("v.u64")->value), 18000000000000000000ull);
  EXPECT_EQ(f.get_int("v.i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_float("v.f64"), -2.5e-300);

  EXPECT_EQ(f.find("v.u8")->type, GgufType::u8);
  EXPECT_EQ(f.find("v.f64")->type, GgufType::f64);
  EXPECT_EQ(f.find("a.u16")->array_type, GgufType::u16);

  EXPECT_EQ(f.get_int_array("a.u8"), (std::vector<int64_t>{1, 255}));
  EXPECT_EQ(f.get_int_array("a.i8"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(f.get_int_array("a.u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f.get_int_array("a.i16"), (std::vector<int64_t>{-32768}));
  EXPECT_EQ(f.get_int_array("a.u32"), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<int64_t>{-1, 2, 3}));
  EXPECT_EQ(f.get_float_array("a.f32"), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(f.get_string_array("a.string"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("a.u64"), (std::vector<int64_t>{1ll << 40}));
  EXPECT_EQ(f.get_int_array("a.i64"), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(f.get_float_array("a.f64"), (std::vector<float>{3.25f}));
  EXPECT_TRUE(f.get_float_array("a.empty").empty());
  EXPECT_EQ(f.find("a.empty")->array_type, GgufType::f32);
  const auto& bools = f.find("a.bool")->as_array("a.bool");
  ASSERT_EQ(bools.size(), 2u);
  EXPECT_FALSE(bools[0].as_bool("a.bool"));
  EXPECT_TRUE(bools[1].as_bool("a.bool"));

  const auto& nested = f.find("a.nested")->as_array("a.nested");
  EXPECT_EQ(f.find("a.nested")->array_type, GgufType::array);
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested[0].array_type, GgufType::i32);
  ASSERT_EQ(nested[0].as_array("x").size(), 2u);
  EXPECT_EQ(nested[0].as_array("x")[1].as_int("x"), 2);
  EXPECT_TRUE(nested[1].as_array("x").empty());
  EXPECT_EQ(nested[2].as_array("x")[0].as_int("x"), 3);
  const auto& ns = f.find("a.nested_strings")->as_array("k")[0].as_array("k");
  EXPECT_EQ(ns[1].as_string("k"), "yz");
}

TEST(Gguf, RoundTripsEveryTensorType) {
  GgufBuilder b = every_type_file();
  Bytes img = b.build();
  GgufFile f = parse(img);
  ASSERT_EQ(f.tensors().size(), 6u);
  ASSERT_EQ(f.tensor_infos().size(), 6u);
  EXPECT_EQ(f.data_offset(), (b.header_bytes() + 31) / 32 * 32);

  struct Want {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
  };
  const std::vector<Want> want = {
      {"t.f32", DType::f32, {2, 3}, 24},        {"t.f16", DType::f16, {4}, 8},
      {"t.bf16", DType::bf16, {3, 1, 2}, 12},   {"t.q8_0", DType::q8_0, {2, 64}, 136},
      {"t.q4_0", DType::q4_0, {2, 1, 3, 32}, 108}, {"t.q4_1", DType::q4_1, {96}, 60},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    const TensorData& t = f.tensor(want[i].name);
    EXPECT_EQ(&t, &f.tensors()[i]);  // file order
    EXPECT_EQ(t.dtype, want[i].dtype);
    EXPECT_EQ(t.shape, want[i].shape);
    EXPECT_EQ(t.nbytes, want[i].nbytes);
    const auto& info = f.tensor_infos()[i];
    EXPECT_TRUE(info.supported);
    EXPECT_EQ(info.offset % 32, 0u);
    EXPECT_EQ(t.data, img.data() + f.data_offset() + info.offset);
    // The bytes are those the writer put there.
    EXPECT_EQ(0, std::memcmp(t.data, b.tensors[i].data.data(), t.nbytes));
    Tensor v = t.view();
    EXPECT_EQ(v.ndim, int(want[i].shape.size()));
    EXPECT_EQ(v.dtype, want[i].dtype);
    EXPECT_EQ(v.nbytes(), want[i].nbytes);
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.data, t.data);
  }
  const TensorData& t = f.tensor("t.f32");
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.view().ptr<const float>()[4], 5.0f);
  EXPECT_EQ(t.view().describe(), "f32[2, 3]");
}

TEST(Gguf, ReadsVersion2AndCustomAlignment) {
  GgufBuilder b;
  b.version = 2;
  b.alignment = 64;
  b.kv("general.alignment", kU32, encode<uint32_t>(64));
  b.tensor({"a", {3}, kGgmlF32, f32_bytes({1, 2, 3})}).tensor({"b", {2}, kGgmlF32, f32_bytes({4, 5})});
  Bytes img = b.build();
  GgufFile f = parse(img);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor_infos()[1].offset, 64u);
  EXPECT_EQ(f.tensor("b").view().ptr<const float>()[1], 5.0f);
}

TEST(Gguf, FileWithoutTensorsOrMetadata) {
  GgufBuilder b;
  Bytes img = b.build();
  EXPECT_EQ(img.size(), 24u);
  GgufFile f = parse(img);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Gguf, GettersNameTheKey) {
  Bytes img = every_type_file().build();
  GgufFile f = parse(img, "m.gguf");
  std::string e = error_of([&] { f.get_int("no.such.key"); });
  EXPECT_HAS(e, "m.gguf");
  EXPECT_HAS(e, "'no.such.key' is missing");
  e = error_of([&] { f.get_string("v.u32"); });
  EXPECT_HAS(e, "m.gguf");
  EXPECT_HAS(e, "'v.u32' holds u32, expected string");
  e = error_of([&] { f.get_int("v.f32"); });
  EXPECT_HAS(e, "'v.f32' holds f32, expected an integer");
  e = error_of([&] { f.get_int("v.u64"); });  // 1.8e19 does not fit in int64
  EXPECT_HAS(e, "'v.u64'");
  EXPECT_HAS(e, "does not fit in int64");
  e = error_of([&] { f.get_bool("v.i8"); });
  EXPECT_HAS(e, "'v.i8' holds i8, expected bool");
  e = error_of([&] { f.get_string_array("a.i32"); });
  EXPECT_HAS(e, "'a.i32' holds i32, expected string (element 0)");
  e = error_of([&] { f.get_int_array("v.u8"); });
  EXPECT_HAS(e, "'v.u8' holds u8, expected an array");
  e = error_of([&] { f.get_float("a.f32"); });
  EXPECT_HAS(e, "'a.f32' holds array of f32, expected a number");
  // Integers are accepted as floats.
  EXPECT_EQ(f.get_float("v.u16"), 60000.0);
  EXPECT_EQ(f.get_float_array("a.i32"), (std::vector<float>{-1, 2, 3}));

  EXPECT_EQ(f.try_int("v.i16"), -30000);
  EXPECT_EQ(f.try_int("missing"), std::nullopt);
  EXPECT_EQ(f.try_string("general.architecture"), "llama");
  EXPECT_EQ(f.try_bool("v.bool"), true);
  EXPECT_EQ(f.try_float("missing"), std::nullopt);
  e = error_of([&] { f.try_string("v.bool"); });  // present with the wrong type
  EXPECT_HAS(e, "'v.bool' holds bool, expected string");
  EXPECT_TRUE(f.has("a.nested"));
  EXPECT_FALSE(f.has("a.nest"));
}

TEST(Gguf, TensorLookupNamesTheTensor) {
  Bytes img = every_type_file().build();
  GgufFile f = parse(img, "m.gguf");
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  std::string e = error_of([&] { f.tensor("nope"); });
  EXPECT_HAS(e, "m.gguf");
  EXPECT_HAS(e, "tensor 'nope' is not in the file");
}

// ---------------------------------------------------------------- malformed files

TEST(GgufMalformed, EveryTruncationIsAnError) {
  Bytes img = every_type_file().build();
  ASSERT_NO_THROW(parse(img));
  for (size_t n = 0; n < img.size(); ++n) {
    // A copy of exactly n bytes, so that AddressSanitizer sees any read past the end.
    Bytes prefix(img.begin(), img.begin() + n);
    std::string e = error_of([&] { GgufFile::parse(prefix.data(), n, "cut.gguf"); });
    EXPECT_HAS(e, "cut.gguf") << " (truncated to " << n << " bytes)";
  }
}

TEST(GgufMalformed, BadMagic) {
  Bytes img = every_type_file().build();
  img[0] = std::byte('X');
  std::string e = parse_error(img);
  EXPECT_HAS(e, "bad.gguf");
  EXPECT_HAS(e, "bad magic 58 47 55 46");
  EXPECT_HAS(e, "expected 'GGUF'");
  EXPECT_HAS(parse_error(Bytes{std::byte('G'), std::byte('G')}), "too small");
}

TEST(GgufMalformed, BadVersion) {
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    GgufBuilder b;
    b.version = v;
    std::string e = parse_error(b.build());
    EXPECT_HAS(e, fmt::format("unsupported GGUF version {}, expected 2 or 3", v));
  }
  GgufBuilder b;
  b.version = 0x03000000;  // a big-endian v3 file read little-endian
  EXPECT_HAS(parse_error(b.build()), "big-endian");
}

TEST(GgufMalformed, HugeCounts) {
  for (uint64_t n : {uint64_t(1) << 62, ~uint64_t(0), uint64_t(1000)}) {
    GgufBuilder b = every_type_file();
    b.n_kv_override = n;
    std::string e = parse_error(b.build());
    if (n == 1000) {
      EXPECT_HAS(e, "n_kv = 1000");  // fits no 1000 entries
    } else {
      EXPECT_HAS(e, fmt::format("n_kv = {}", n));
    }
    b = every_type_file();
    b.n_tensors_override = n;
    EXPECT_HAS(parse_error(b.build()), fmt::format("n_tensors = {}", n));
  }
}

TEST(GgufMalformed, CountLargerThanTheEntries) {
  // n_kv passes the size bound (there are bytes left: the tensor infos) but entries run out.
  GgufBuilder b = every_type_file();
  b.n_kv_override = b.kvs.size() + 1;
  std::string e = parse_error(b.build());
  EXPECT_HAS(e, "bad.gguf");
}

TEST(GgufMalformed, StringLengthPastTheEnd) {
  GgufBuilder b;
  b.kv("k", kString, encode<uint64_t>(1000));  // a string of 1000 bytes, absent
  EXPECT_HAS(parse_error(b.build()), "the string value of metadata key 'k' has length 1000");

  ByteSink s;  // the key itself too long
  s.append("GGUF", 4).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1).put<uint64_t>(1ull << 40);
  s.append("abcdefghijklmnop", 16);
  EXPECT_HAS(parse_error(s.bytes), "the key of metadata entry #0 has length 1099511627776");
}

TEST(GgufMalformed, ArrayLengthPastTheEnd) {
  GgufBuilder b;
  b.kv("tokens", kArray, encode_array(kString, {encode_string("a")}, 1ull << 60));
  std::string e = parse_error(b.build());
  EXPECT_HAS(e, "metadata key 'tokens' is an array of 1152921504606846976 string elements");
  b = GgufBuilder();
  b.kv("ids", kArray, encode_array(kU32, {encode<uint32_t>(1)}, ~uint64_t(0)));
  EXPECT_HAS(parse_error(b.build()), "metadata key 'ids' is an array of 18446744073709551615 u32");
  b = GgufBuilder();
  b.kv("ids", kArray, encode_array(kU32, {encode<uint32_t>(1)}, 2));  // 4 bytes short
  EXPECT_HAS(parse_error(b.build()), "metadata key 'ids'");
}

TEST(GgufMalformed, BadValueTypes) {
  GgufBuilder b;
  b.kv("weird", 13, encode<uint32_t>(0));
  EXPECT_HAS(parse_error(b.build()), "metadata key 'weird' has value type 13, expected 0..12");
  b = GgufBuilder();
  b.kv("weird.array", kArray, encode_array(99, {}));
  EXPECT_HAS(parse_error(b.build()), "metadata key 'weird.array' is an array of element type 99");
  b = GgufBuilder();
  b.kv("flag", kBool, encode<uint8_t>(2));
  EXPECT_HAS(parse_error(b.build()), "metadata key 'flag' is a bool with byte value 2, expected 0 or 1");
}

TEST(GgufMalformed, ArraysNestedTooDeep) {
  Bytes v = encode_array(kI32, {});
  for (int i = 0; i < GgufFile::kMaxArrayDepth; ++i) v = encode_array(kArray, {v});
  GgufBuilder b;
  b.kv("deep", kArray, v);
  EXPECT_HAS(parse_error(b.build()), "metadata key 'deep' nests arrays deeper than 8 levels");

  // One level less is fine.
  Bytes ok = encode_array(kI32, {encode<int32_t>(5)});
  for (int i = 0; i < GgufFile::kMaxArrayDepth - 1; ++i) ok = encode_array(kArray, {ok});
  GgufBuilder good;
  good.kv("deep", kArray, ok);
  Bytes img = good.build();
  EXPECT_NO_THROW(parse(img));
}

TEST(GgufMalformed, TooManyMetadataValues) {
  // The bytes are there (so the per-array bound passes), but the element count is past the
  // global limit: refused before any element is stored.
  const uint64_t n = GgufFile::kMaxMetadataValues + 1;
  GgufBuilder b;
  b.kv("big", kArray, encode_array(kU8, {}, n));
  Bytes img = b.build();
  img.resize(img.size() + n, std::byte{1});
  std::string e = parse_error(img);
  EXPECT_HAS(e, "metadata key 'big' brings the metadata to 16777217 values, more than the limit of 16777216");
}

TEST(GgufMalformed, MetadataMemoryIsCapped) {
  // Each array element is held as one GgufValue (~48 bytes): 6M one-byte elements, a 6 MB file,
  // would take ~290 MB. Refused before any element is stored.
  const uint64_t n = 6000000;
  GgufBuilder b;
  b.kv("bytes", kArray, encode_array(kU8, {}, n));
  Bytes img = b.build();
  img.resize(img.size() + n, std::byte{1});
  std::string e = parse_error(img);
  EXPECT_HAS(e, "bad.gguf: metadata key 'bytes' brings the metadata to 6000000 values");
  EXPECT_HAS(e, "more than the limit of 256 MiB");

  // A large real vocabulary's three arrays (tokens, scores, token types) of 300k entries load.
  const uint64_t vocab = 300000;
  GgufBuilder real;
  for (const char* key :
       {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
    Bytes v = encode_array(kU8, {}, vocab);
    v.resize(v.size() + vocab, std::byte{7});
    real.kv(key, kArray, v);
  }
  Bytes ok = real.build();
  GgufFile f = parse(ok);
  EXPECT_EQ(f.find("tokenizer.ggml.scores")->as_array("tokenizer.ggml.scores").size(), vocab);
}

TEST(GgufMalformed, DuplicateKeyAndTensorName) {
  GgufBuilder b;
  b.kv("k", kU32, encode<uint32_t>(1)).kv("k", kU32, encode<uint32_t>(2));
  EXPECT_HAS(parse_error(b.build()), "metadata key 'k' appears twice");
  b = GgufBuilder();
  b.tensor({"w", {4}, kGgmlF32, pattern_bytes(16)}).tensor({"w", {4}, kGgmlF32, pattern_bytes(16)});
  EXPECT_HAS(parse_error(b.build()), "tensor 'w' appears twice");
}

TEST(GgufMalformed, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufBuilder b;
    b.kv("general.alignment", kU32, encode<uint32_t>(a));
    EXPECT_HAS(parse_error(b.build()),
               fmt::format("'general.alignment' is {}, expected a nonzero power of two", a));
  }
  GgufBuilder b;
  b.kv("general.alignment", kU64, encode<uint64_t>(32));
  EXPECT_HAS(parse_error(b.build()), "'general.alignment' has type u64, expected u32");
}

TEST(GgufMalformed, BadDims) {
  for (uint32_t n : {0u, 5u, 1000000u}) {
    GgufBuilder b;
    b.tensor({"w", {4}, kGgmlF32, pattern_bytes(16), std::nullopt, n});
    EXPECT_HAS(parse_error(b.build()), fmt::format("tensor 'w' has n_dims {}, expected 1..4", n));
  }
  GgufBuilder b;
  b.tensor({"w", {4, 0}, kGgmlF32, {}});
  EXPECT_HAS(parse_error(b.build()), "tensor 'w' has ne[1] = 0");
  b = GgufBuilder();
  b.tensor({"w", {1ull << 63}, kGgmlF32, {}});
  EXPECT_HAS(parse_error(b.build()), "tensor 'w' has ne[0] = 9223372036854775808");
}

TEST(GgufMalformed, DimsProductOverflow) {
  GgufBuilder b;
  b.tensor({"w", {1ull << 32, 1ull << 32}, kGgmlF32, {}});
  std::string e = parse_error(b.build());
  EXPECT_HAS(e, "tensor 'w' has 2^64+ elements");
  b = GgufBuilder();
  b.tensor({"w", {1ull << 32, 1ull << 31}, kGgmlF32, {}});  // 2^63 elements: past int64
  EXPECT_HAS(parse_error(b.build()), "tensor 'w' has 9223372036854775808 elements (product of ne[0..1])");
  b = GgufBuilder();  // fits in int64 elements, but not in bytes
  b.tensor({"w", {1ull << 31, 1ull << 31}, kGgmlF32, {}});
  EXPECT_HAS(parse_error(b.build()), "tensor 'w' of 4611686018427387904 elements of type F32 has a byte size past 2^64");
}

TEST(GgufMalformed, UnknownGgmlType) {
  for (uint32_t t : {4u, 31u, 1000u}) {
    GgufBuilder b;
    b.tensor({"blk.0.w", {32}, t, pattern_bytes(32)});
    std::string e = parse_error(b.build());
    EXPECT_HAS(e, fmt::format("tensor 'blk.0.w' has ggml type {}", t));
    EXPECT_HAS(e, "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
                  "IQ4_XS, BF16");
  }
}

TEST(Gguf, UnsupportedTypeIsRefusedWhenUsed) {
  GgufBuilder b;
  b.kv("tokenizer.ggml.model", kString, encode_string("gpt2"));
  b.tensor({"a", {4}, kGgmlF32, pattern_bytes(16)})
      .tensor({"blk.0.ffn_down.weight", {256, 2}, kGgmlIq2Xxs, pattern_bytes(2 * 66)})
      .tensor({"c", {4}, kGgmlF16, pattern_bytes(8)});
  Bytes img = b.build();
  GgufFile f = parse(img, "k.gguf");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[1].name, "c");
  ASSERT_EQ(f.tensor_infos().size(), 3u);
  const GgufTensorInfo* info = f.find_tensor_info("blk.0.ffn_down.weight");
  ASSERT_NE(info, nullptr);
  EXPECT_FALSE(info->supported);
  EXPECT_EQ(info->ggml_type, 16u);
  EXPECT_EQ(info->shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(info->nbytes, 132u);
  std::string e = error_of([&] { f.tensor("blk.0.ffn_down.weight"); });
  EXPECT_HAS(e, "k.gguf");
  EXPECT_HAS(e, "tensor 'blk.0.ffn_down.weight' has ggml type 16 (IQ2_XXS), which ridge does not support");
  // An optional lookup must not take it as absent either.
  e = error_of([&] { f.find_tensor("blk.0.ffn_down.weight"); });
  EXPECT_HAS(e, "tensor 'blk.0.ffn_down.weight' has ggml type 16 (IQ2_XXS)");
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
}

TEST(GgufMalformed, UnsupportedTypeLayoutIsStillValidated) {
  GgufBuilder b;
  b.tensor({"k", {256}, kGgmlIq2Xxs, pattern_bytes(50)});  // needs 66 bytes
  EXPECT_HAS(parse_error(b.build()), "tensor 'k' occupies data bytes [0, 66)");
  b = GgufBuilder();
  b.tensor({"k", {128}, kGgmlIq2Xxs, pattern_bytes(66)});
  EXPECT_HAS(parse_error(b.build()), "ne[0] = 128, expected a multiple of the 256-element block");
}

TEST(GgufMalformed, QuantizedRowNotAMultipleOfTheBlock) {
  GgufBuilder b;
  b.tensor({"q", {48, 2}, kGgmlQ8_0, pattern_bytes(136)});
  EXPECT_HAS(parse_error(b.build()),
             "tensor 'q' of type Q8_0 has innermost dimension ne[0] = 48, expected a multiple of the "
             "32-element block");
}

TEST(GgufMalformed, MisalignedOffset) {
  GgufBuilder b;
  b.tensor({"a", {4}, kGgmlF32, pattern_bytes(16)}).tensor({"b", {4}, kGgmlF32, pattern_bytes(16), 40});
  EXPECT_HAS(parse_error(b.build()),
             "tensor 'b' has data offset 40, which is not a multiple of the alignment 32");
}

TEST(GgufMalformed, TensorPastTheEnd) {
  GgufBuilder b;
  b.tensor({"a", {4}, kGgmlF32, pattern_bytes(16)}).tensor({"b", {8}, kGgmlF32, pattern_bytes(16)});
  std::string e = parse_error(b.build());
  EXPECT_HAS(e, "tensor 'b' occupies data bytes [32, 64) (32 bytes), past the end of the data section (48 bytes");
  b = GgufBuilder();
  b.tensor({"a", {16}, kGgmlF32, pattern_bytes(64), ~uint64_t(0) - 31});  // offset + size overflows
  EXPECT_HAS(parse_error(b.build()), "tensor 'a' occupies data bytes [18446744073709551584, 2^64+)");
}

TEST(GgufMalformed, OverlappingTensors) {
  GgufBuilder b;
  b.tensor({"a", {16}, kGgmlF32, pattern_bytes(64)})
      .tensor({"b", {8}, kGgmlF32, pattern_bytes(32), 32})
      .tensor({"c", {4}, kGgmlF32, pattern_bytes(16), 128});
  EXPECT_HAS(parse_error(b.build()),
             "tensor 'a' (data bytes [0, 64)) overlaps tensor 'b' (data bytes [32, 64))");
  b = GgufBuilder();  // same offset twice
  b.tensor({"a", {4}, kGgmlF32, pattern_bytes(16)}).tensor({"b", {4}, kGgmlF32, pattern_bytes(16), 0});
  EXPECT_HAS(parse_error(b.build()), "overlaps tensor");
}

TEST(GgufMalformed, DataSectionPastTheEnd) {
  GgufBuilder b;
  b.tensor({"a", {4}, kGgmlF32, {}});  // no data written: the file ends within the padding
  Bytes img = b.build();
  img.resize(b.header_bytes() + 1);
  std::string e = parse_error(img);
  EXPECT_HAS(e, "the tensor data section starts at offset");
  EXPECT_HAS(e, "past the end of the file");
}

TEST(GgufValue, ConversionsNameTheKey) {
  GgufValue v;
  v.type = GgufType::string;
  v.value = std::string("x");
  EXPECT_HAS(error_of([&] { v.as_int("my.key"); }), "metadata key 'my.key' holds string");
  EXPECT_HAS(error_of([&] { v.as_array("my.key"); }), "expected an array");
  EXPECT_EQ(gguf_type_name(GgufType::boolean), "bool");
  EXPECT_EQ(gguf_type_name(GgufType(77)), "unknown");
}

TEST(GgmlTypes, TableMatchesTheDTypes) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1,
                  DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k,
                  DType::q6_k, DType::iq4_nl, DType::iq4_xs}) {
    auto id = ggml_type_of(d);
    ASSERT_TRUE(id.has_value());
    const GgmlTypeInfo* info = ggml_type_info(*id);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, d);
    EXPECT_EQ(info->block_elems, dtype_info(d).block_elems);
    EXPECT_EQ(info->block_bytes, dtype_info(d).block_bytes);
  }
  EXPECT_FALSE(ggml_type_of(DType::fp8_e4m3).has_value());
  EXPECT_EQ(ggml_type_info(4), nullptr);
}

}  // namespace
}  // namespace ridge::io
