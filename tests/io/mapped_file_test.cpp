#include "ridge/io/mapped_file.h"

#include <gtest/gtest.h>

#include "ridge/io/gguf.h"
#include "io/temp_dir.h"

namespace ridge::io {
namespace {

using namespace ridge::io::testing;

TEST(MappedFile, MapsTheWholeFile) {
  TempDir dir;
  std::string p = dir.write("data.bin", std::string("hello, mmap"));
  MappedFile f(p);
  EXPECT_EQ(f.path(), p);
  ASSERT_EQ(f.size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.data()), f.size()), "hello, mmap");
  EXPECT_EQ(f.bytes().size(), 11u);
}

TEST(MappedFile, IsMoveOnly) {
  static_assert(!std::is_copy_constructible_v<MappedFile>);
  static_assert(std::is_nothrow_move_constructible_v<MappedFile>);
  TempDir dir;
  std::string p = dir.write("a.bin", std::string("abc"));
  MappedFile a(p);
  const std::byte* data = a.data();
  MappedFile b(std::move(a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  MappedFile c(dir.write("c.bin", std::string("xy")));
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(char(c.data()[2]), 'c');
  MappedFile empty;
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(MappedFile, ErrorsNameThePath) {
  TempDir dir;
  std::string missing = dir.file("missing.gguf");
  std::string e = error_of([&] { MappedFile f(missing); });
  EXPECT_HAS(e, missing);
  EXPECT_HAS(e, "No such file or directory");

  std::string empty = dir.write("empty.gguf", std::string());
  e = error_of([&] { MappedFile f(empty); });
  EXPECT_HAS(e, empty);
  EXPECT_HAS(e, "is empty (0 bytes)");

  e = error_of([&] { MappedFile f(dir.path().string()); });
  EXPECT_HAS(e, dir.path().string());
  EXPECT_HAS(e, "not a regular file");
}

TEST(MappedFile, GgufOpenKeepsTheMappingAlive) {
  TempDir dir;
  GgufBuilder b;
  b.kv("general.name", kString, encode_string("tiny"));
  b.tensor({"w", {2}, kGgmlF32, encode<uint64_t>(0x4000000040400000ull)});  // {3.0f, 2.0f}
  std::string p = dir.write("tiny.gguf", b.build());
  GgufFile moved = [&] {
    GgufFile f = GgufFile::open(p);
    return f;
  }();
  EXPECT_EQ(moved.path(), p);
  EXPECT_EQ(moved.get_string("general.name"), "tiny");
  EXPECT_EQ(moved.tensor("w").view().ptr<const float>()[0], 3.0f);
  EXPECT_EQ(moved.tensor("w").view().ptr<const float>()[1], 2.0f);

  std::string bad = dir.write("bad.gguf", std::string("GGUF\x09\0\0\0", 8));
  std::string e = error_of([&] { GgufFile::open(bad); });
  EXPECT_HAS(e, bad);
  EXPECT_HAS(e, "unsupported GGUF version 9");
}

}  // namespace
}  // namespace ridge::io
