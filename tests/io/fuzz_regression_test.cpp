// Inputs the fuzzers found that once crashed a reader (docs/FUZZING.md lists them), kept as
// unit tests. Each is also under fuzz/regressions/, which the last test replays in full, so a
// new crash input dropped there is tested without writing code.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "ridge/io/gguf.h"
#include "ridge/io/safetensors.h"
#include "io/temp_dir.h"

namespace ridge::io {
namespace {

using namespace ridge::io::testing;

// fuzz_safetensors: a header number too large for a double (214748361e348) made nlohmann throw
// json::out_of_range (406) rather than json::parse_error, which escaped the reader uncaught.
const uint8_t kNumberOverflow406[] = {
    0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x69, 0x64, 0x73, 0x22, 0x3a, 0x32,
    0x31, 0x34, 0x37, 0x34, 0x38, 0x33, 0x36, 0x31, 0x65, 0x33, 0x34, 0x38, 0x7b, 0x22, 0x64, 0x74,
    0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x22, 0x73, 0x68,
    0x61, 0x70, 0x65, 0x22, 0x31, 0x38, 0x34, 0x34, 0x36, 0x37, 0x34, 0x34, 0x30, 0x37, 0x33, 0x37,
    0x30, 0x39, 0x35, 0x35, 0x31, 0x36, 0x31, 0x35, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x31, 0x36, 0x5d,
    0x7d, 0x2c, 0x22, 0x77, 0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22,
    0x46, 0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x23, 0x5b, 0x32, 0x5d,
    0x31, 0x36, 0x31, 0x35, 0x22, 0x3a, 0x5b, 0x30, 0x2c, 0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x77,
    0x22, 0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46, 0x33, 0x32, 0x22,
    0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x23, 0x5b, 0x32, 0x5d, 0x64, 0x2c, 0xf7, 0x22,
    0x3f,
};

TEST(FuzzRegression, SafetensorsHeaderNumberOverflow) {
  std::string e = error_of([] {
    SafetensorsFile::parse(reinterpret_cast<const std::byte*>(kNumberOverflow406),
                           sizeof(kNumberOverflow406), "crash.safetensors");
  });
  EXPECT_HAS(e, "crash.safetensors: header is not valid JSON");
  EXPECT_HAS(e, "number overflow");
  // The same in a well-formed header, and in a JSON file (config.json).
  std::string h = R"({"w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 4]}})";
  Bytes img = safetensors_image(h, pattern_bytes(4));
  EXPECT_HAS(error_of([&] { SafetensorsFile::parse(img.data(), img.size(), "x.safetensors"); }),
             "header is not valid JSON");
  TempDir dir;
  std::string p = dir.write("config.json", std::string(R"({"rope_theta": 1e400})"));
  e = error_of([&] { read_json_file(p); });
  EXPECT_HAS(e, p);
  EXPECT_HAS(e, "invalid JSON");
}

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(chars.size());
  if (!chars.empty()) std::memcpy(b.data(), chars.data(), chars.size());
  return b;
}

// Every committed crash input: the reader must refuse it with ridge::Error or read it; any other
// exception (or a sanitizer report, in the asan build) fails.
TEST(FuzzRegression, EveryCommittedCrashInput) {
  const std::filesystem::path root = std::filesystem::path(RIDGE_SOURCE_DIR) / "fuzz" / "regressions";
  int n = 0;
  for (const char* format : {"gguf", "safetensors"}) {
    if (!std::filesystem::is_directory(root / format)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(root / format)) {
      SCOPED_TRACE(entry.path().string());
      Bytes b = read_file(entry.path());
      const std::string name = entry.path().filename().string();
      EXPECT_NO_THROW({
        try {
          if (std::string(format) == "gguf") {
            GgufFile::parse(b.data(), b.size(), name);
          } else {
            SafetensorsFile::parse(b.data(), b.size(), name);
          }
        } catch (const ridge::Error&) {
        }
      });
      ++n;
    }
  }
  EXPECT_GE(n, 1) << "no regression inputs found under " << root;
}

}  // namespace
}  // namespace ridge::io
