// safetensors reader: round trips, then one test per kind of malformed header, each checking that
// the message names the bad field.
#include "ridge/io/safetensors.h"

#include <gtest/gtest.h>

#include "io/test_writers.h"

namespace ridge::io {
namespace {

using namespace ridge::io::testing;

SafetensorsFile parse(const Bytes& b, const std::string& name = "test.safetensors") {
  return SafetensorsFile::parse(b.data(), b.size(), name);
}

std::string parse_error(const Bytes& b) {
  return error_of([&] { parse(b, "bad.safetensors"); });
}

// An image with the given header text over `data_bytes` bytes of data.
std::string header_error(const std::string& header, size_t data_bytes = 64) {
  return parse_error(safetensors_image(header, pattern_bytes(data_bytes)));
}

std::vector<SafetensorsSpec> sample_tensors() {
  return {
      {"model.embed_tokens.weight", "BF16", {4, 3}, pattern_bytes(24, 1)},
      {"model.norm.weight", "F32", {3}, pattern_bytes(12, 2)},
      {"lm_head.weight", "F16", {2, 1, 2, 3}, pattern_bytes(24, 3)},
      {"scalar", "F32", {}, pattern_bytes(4, 4)},
      {"empty", "F16", {0, 5}, {}},
  };
}

TEST(Safetensors, RoundTrip) {
  auto specs = sample_tensors();
  Bytes img = safetensors_file(specs, {{"format", "pt"}, {"note", "ünïcode"}});
  SafetensorsFile f = parse(img);
  EXPECT_EQ(f.path(), "test.safetensors");
  EXPECT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "ünïcode");
  uint64_t header_len;
  std::memcpy(&header_len, img.data(), 8);
  EXPECT_EQ(f.data_offset(), 8 + header_len);
  ASSERT_EQ(f.tensors().size(), specs.size());
  ASSERT_EQ(f.tensor_infos().size(), specs.size());
  for (const auto& s : specs) {
    SCOPED_TRACE(s.name);
    const TensorData& t = f.tensor(s.name);
    EXPECT_EQ(dtype_name(t.dtype), s.dtype == "BF16" ? "bf16" : s.dtype == "F16" ? "f16" : "f32");
    EXPECT_EQ(t.shape, s.shape);
    EXPECT_EQ(t.nbytes, s.data.size());
    if (t.nbytes) {
      EXPECT_EQ(0, std::memcmp(t.data, s.data.data(), t.nbytes));
    }
    const auto* info = f.find_tensor_info(s.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, s.dtype);
    EXPECT_EQ(info->end - info->begin, s.data.size());
    EXPECT_EQ(t.data, img.data() + f.data_offset() + info->begin);
  }
  // In data order.
  EXPECT_EQ(f.tensors()[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(f.tensors()[2].name, "lm_head.weight");
  Tensor v = f.tensor("lm_head.weight").view();
  EXPECT_EQ(v.describe(), "f16[2, 1, 2, 3]");
  EXPECT_EQ(v.nbytes(), 24u);
  Tensor s = f.tensor("scalar").view();
  EXPECT_EQ(s.describe(), "f32[1]");
  EXPECT_EQ(f.tensor("empty").numel(), 0);
  EXPECT_EQ(f.tensor("empty").view().numel(), 0);
}

TEST(Safetensors, HeaderOnlyAndNoTensors) {
  SafetensorsFile f = parse(safetensors_image("{}", Bytes{}));
  EXPECT_TRUE(f.tensors().empty());
  f = parse(safetensors_image("{\"__metadata__\": {}}   ", Bytes{}));  // trailing spaces: padding
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, LookupsNameTheTensor) {
  Bytes img = safetensors_file(sample_tensors());
  SafetensorsFile f = parse(img, "w.safetensors");
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  std::string e = error_of([&] { f.tensor("nope"); });
  EXPECT_HAS(e, "w.safetensors");
  EXPECT_HAS(e, "tensor 'nope' is not in the file (5 tensors)");
}

TEST(Safetensors, UnsupportedDTypeIsRefusedWhenUsed) {
  std::vector<SafetensorsSpec> specs = {
      {"position_ids", "I64", {1, 3}, pattern_bytes(24)},
      {"w", "F32", {2}, pattern_bytes(8)},
      {"mask", "BOOL", {5}, pattern_bytes(5)},
      {"fp8", "F8_E4M3", {4}, pattern_bytes(4)},
  };
  Bytes img = safetensors_file(specs);
  SafetensorsFile f = parse(img, "m.safetensors");
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].name, "w");
  ASSERT_EQ(f.tensor_infos().size(), 4u);
  EXPECT_FALSE(f.find_tensor_info("position_ids")->supported);
  EXPECT_HAS(error_of([&] { f.find_tensor("position_ids"); }), "tensor 'position_ids' has dtype I64");
  std::string e = error_of([&] { f.tensor("position_ids"); });
  EXPECT_HAS(e, "m.safetensors");
  EXPECT_HAS(e, "tensor 'position_ids' has dtype I64, which ridge does not support");
  EXPECT_HAS(error_of([&] { f.tensor("fp8"); }), "tensor 'fp8' has dtype F8_E4M3");
}

TEST(Safetensors, ViewRefusesRankAboveFour) {
  Bytes img = safetensors_file({{"conv3d", "F32", {1, 1, 1, 1, 2}, pattern_bytes(8)}});
  SafetensorsFile f = parse(img);
  const TensorData& t = f.tensor("conv3d");
  EXPECT_EQ(t.shape.size(), 5u);
  EXPECT_HAS(error_of([&] { t.view(); }), "tensor 'conv3d' has rank 5");
}

// ---------------------------------------------------------------- malformed files

TEST(SafetensorsMalformed, EveryTruncationIsAnError) {
  Bytes img = safetensors_file(sample_tensors(), {{"format", "pt"}});
  ASSERT_NO_THROW(parse(img));
  for (size_t n = 0; n < img.size(); ++n) {
    Bytes prefix(img.begin(), img.begin() + n);  // exactly n bytes, for AddressSanitizer
    std::string e = error_of([&] { SafetensorsFile::parse(prefix.data(), n, "cut.safetensors"); });
    EXPECT_HAS(e, "cut.safetensors") << " (truncated to " << n << " bytes)";
  }
}

TEST(SafetensorsMalformed, HeaderLength) {
  EXPECT_HAS(parse_error(Bytes(7)), "file of 7 bytes is too small for the 8-byte header length");
  EXPECT_HAS(parse_error(safetensors_image("{}", Bytes{}, 3)), "header length 3 runs past the end of the file (2 bytes");
  EXPECT_HAS(parse_error(safetensors_image("{}", Bytes{}, ~uint64_t(0))),
             "header length 18446744073709551615 is more than the limit of 104857600 bytes");
  EXPECT_HAS(parse_error(safetensors_image("{}", Bytes{}, (100ull << 20) + 1)), "header length 104857601");
  EXPECT_HAS(parse_error(safetensors_image("{}", Bytes{}, 1)), "header length 1 is too short");
  EXPECT_HAS(parse_error(safetensors_image("[]", Bytes{})), "header starts with byte 0x5b, expected '{'");
}

TEST(SafetensorsMalformed, BadJson) {
  std::string e = header_error(R"({"a": {"dtype": "F32",, }})");
  EXPECT_HAS(e, "bad.safetensors");
  EXPECT_HAS(e, "header is not valid JSON (error at header byte 23");
  e = header_error("{\"a\": 1} trailing");
  EXPECT_HAS(e, "header is not valid JSON");
  e = header_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "dtype": "F16"}})");
  EXPECT_HAS(e, "header JSON has key 'dtype' twice");
  e = header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})");
  EXPECT_HAS(e, "header JSON has key 'w' twice");
  std::string deep = "{\"x\": " + std::string(40, '[') + std::string(40, ']') + "}";
  EXPECT_HAS(header_error(deep), "header JSON nests deeper than 16 levels");
}

TEST(SafetensorsMalformed, BadEntries) {
  EXPECT_HAS(header_error(R"({"w": 3})"), "tensor 'w' is JSON number, expected an object");
  EXPECT_HAS(header_error(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})"), "tensor 'w' has no 'dtype'");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})"), "tensor 'w' has no 'shape'");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1]}})"), "tensor 'w' has no 'data_offsets'");
  EXPECT_HAS(header_error(R"({"w": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}})"),
             "tensor 'w' has dtype 5, expected a string");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}})"),
             "tensor 'w' has shape 4, expected an array");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})"),
             "tensor 'w' has shape element -1, expected a non-negative integer");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})"),
             "tensor 'w' has shape element 1.5");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})"),
             "tensor 'w' has data_offsets [0], expected [begin, end]");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": ["0", 4]}})"),
             "tensor 'w' has data_offsets element \"0\"");
  EXPECT_HAS(header_error(R"({"__metadata__": {"format": 1}})"),
             "'__metadata__' key 'format' is JSON number, expected a string");
  EXPECT_HAS(header_error(R"({"__metadata__": []})"), "'__metadata__' is JSON array, expected an object");
}

TEST(SafetensorsMalformed, UnknownDType) {
  std::string e = header_error(R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 1]}})");
  EXPECT_HAS(e, "tensor 'w' has dtype 'Q4', which this reader does not know");
  EXPECT_HAS(e, "F32, F16, BF16");
}

TEST(SafetensorsMalformed, BadDataOffsets) {
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})"),
             "tensor 'w' has data_offsets [8, 4] with begin > end");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [56, 72]}})"),
             "tensor 'w' has data_offsets [56, 72] past the end of the data section (64 bytes)");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})"),
             "tensor 'w' of dtype F32 and shape [3] needs 12 bytes, but data_offsets [0, 16] hold 16");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551615]}})"),
             "past the end of the data section");
  EXPECT_HAS(header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 18446744073709551616]}})"),
             "tensor 'w' has data_offsets element 1.8446744073709552e+19");
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  std::string e = header_error(
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})");
  EXPECT_HAS(e, "tensor 'w' has shape [4294967296,4294967296] with more than 9223372036854775807 elements");
  e = header_error(R"({"w": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})");
  EXPECT_HAS(e, "tensor 'w' of dtype F32 and shape [4611686018427387904] needs 2^64+ bytes");
  e = header_error(R"({"w": {"dtype": "F32", "shape": [0, 9223372036854775808], "data_offsets": [0, 0]}})");
  EXPECT_HAS(e, "tensor 'w' has shape [0,9223372036854775808] with more than");
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  std::string e = header_error(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                               R"( "b": {"dtype": "F16", "shape": [4], "data_offsets": [8, 16]}})");
  EXPECT_HAS(e, "tensor 'a' (data_offsets [0, 16]) overlaps tensor 'b' (data_offsets [8, 16])");
  // An empty tensor overlaps nothing, wherever it points.
  Bytes img = safetensors_image(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                                R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}})",
                                pattern_bytes(16));
  EXPECT_NO_THROW(parse(img));
}

}  // namespace
}  // namespace ridge::io
