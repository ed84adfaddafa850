// SafetensorsModel (HF folders: config.json + one file or index + shards) and read_json_file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>

#include <gtest/gtest.h>

#include "ridge/io/safetensors.h"
#include "io/temp_dir.h"

namespace ridge::io {
namespace {

using namespace ridge::io::testing;

const std::string kConfig = R"({"model_type": "llama", "hidden_size": 8})";

std::string index_json(const std::map<std::string, std::string>& weight_map) {
  nlohmann::json j = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  return j.dump(2);
}

// Two shards: a+b in shard 1, c in shard 2.
void write_sharded(const TempDir& dir) {
  dir.write("config.json", kConfig);
  dir.write("model-00001-of-00002.safetensors",
            safetensors_file({{"a", "F32", {2}, pattern_bytes(8, 1)}, {"b", "BF16", {3}, pattern_bytes(6, 2)}}));
  dir.write("model-00002-of-00002.safetensors", safetensors_file({{"c", "F16", {2, 2}, pattern_bytes(8, 3)}}));
  dir.write("model.safetensors.index.json",
            index_json({{"a", "model-00001-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"}}));
}

TEST(SafetensorsModel, SingleFileFolder) {
  TempDir dir;
  dir.write("config.json", kConfig);
  dir.write("model.safetensors", safetensors_file({{"w", "F32", {2, 2}, pattern_bytes(16)}}));
  SafetensorsModel m = SafetensorsModel::open(dir.path().string());
  EXPECT_EQ(m.dir(), dir.path().string());
  EXPECT_EQ(m.config()["model_type"], "llama");
  EXPECT_EQ(m.config()["hidden_size"], 8);
  ASSERT_EQ(m.tensors().size(), 1u);
  EXPECT_EQ(m.tensor("w").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.find_tensor("x"), nullptr);
  std::string e = error_of([&] { m.tensor("x"); });
  EXPECT_HAS(e, "tensor 'x' is not in any of its 1 safetensors file(s)");
  EXPECT_HAS(e, dir.path().string());

  // The file itself also opens the model, config.json read beside it.
  SafetensorsModel m2 = SafetensorsModel::open(dir.file("model.safetensors"));
  EXPECT_EQ(m2.tensors().size(), 1u);
  EXPECT_EQ(m2.config()["hidden_size"], 8);
}

TEST(SafetensorsModel, Sharded) {
  TempDir dir;
  write_sharded(dir);
  SafetensorsModel m = SafetensorsModel::open(dir.path().string());
  EXPECT_EQ(m.files().size(), 2u);
  ASSERT_EQ(m.tensors().size(), 3u);
  EXPECT_EQ(m.tensor("a").dtype, DType::f32);
  EXPECT_EQ(m.tensor("b").dtype, DType::bf16);
  EXPECT_EQ(m.tensor("c").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::to_integer<int>(m.tensor("c").data[0]), 3);  // pattern seed of shard 2
  // A moved model keeps its tensor pointers valid.
  SafetensorsModel moved = std::move(m);
  EXPECT_EQ(moved.tensor("a").nbytes, 8u);
  EXPECT_EQ(moved.tensors()[2]->name, "c");
  // The index file names the model too.
  SafetensorsModel m3 = SafetensorsModel::open(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(m3.tensors().size(), 3u);
}

TEST(SafetensorsModel, IndexNamingAMissingShard) {
  TempDir dir;
  write_sharded(dir);
  std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
  std::string e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "model.safetensors.index.json");
  EXPECT_HAS(e, "shard 'model-00002-of-00002.safetensors' (holding tensor 'c') is missing");
}

TEST(SafetensorsModel, IndexNamingATensorTheShardLacks) {
  TempDir dir;
  write_sharded(dir);
  dir.write("model.safetensors.index.json",
            index_json({{"a", "model-00001-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"},
                        {"d", "model-00002-of-00002.safetensors"}}));
  std::string e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "tensor 'd' is said to be in shard 'model-00002-of-00002.safetensors'");
  EXPECT_HAS(e, "does not hold it");

  dir.write("model.safetensors.index.json",
            index_json({{"a", "model-00002-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"}}));
  e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "tensor 'a' is said to be in shard 'model-00002-of-00002.safetensors', but it is in");
}

TEST(SafetensorsModel, TensorInTwoShards) {
  TempDir dir;
  write_sharded(dir);
  dir.write("model-00002-of-00002.safetensors",
            safetensors_file({{"c", "F16", {2, 2}, pattern_bytes(8)}, {"a", "F32", {2}, pattern_bytes(8)}}));
  std::string e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "tensor 'a' is in both");
  EXPECT_HAS(e, "model-00001-of-00002.safetensors");
  EXPECT_HAS(e, "model-00002-of-00002.safetensors");
}

TEST(SafetensorsModel, BadIndex) {
  TempDir dir;
  write_sharded(dir);
  dir.write("model.safetensors.index.json", index_json({{"a", "../outside.safetensors"}}));
  std::string e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "weight_map entry 'a' names shard '../outside.safetensors', expected a plain file name");
  dir.write("model.safetensors.index.json", std::string(R"({"metadata": {}})"));
  EXPECT_HAS(error_of([&] { SafetensorsModel::open(dir.path().string()); }), "index has no 'weight_map'");
  dir.write("model.safetensors.index.json", std::string(R"({"weight_map": {"a": 1}})"));
  EXPECT_HAS(error_of([&] { SafetensorsModel::open(dir.path().string()); }),
             "weight_map entry 'a' is JSON number, expected a file name");
  dir.write("model.safetensors.index.json", std::string(R"({"weight_map": {}})"));
  EXPECT_HAS(error_of([&] { SafetensorsModel::open(dir.path().string()); }), "'weight_map' is empty");
}

TEST(SafetensorsModel, MissingPieces) {
  TempDir dir;
  std::string e = error_of([&] { SafetensorsModel::open(dir.file("nowhere")); });
  EXPECT_HAS(e, "model path '" + dir.file("nowhere") + "' does not exist");
  e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "has neither model.safetensors nor model.safetensors.index.json");
  dir.write("model.safetensors", safetensors_file({{"w", "F32", {1}, pattern_bytes(4)}}));
  e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, "has no config.json");
  dir.write("config.json", std::string("{\n  \"hidden_size\": 8,\n  oops\n}"));
  e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, dir.file("config.json"));
  EXPECT_HAS(e, "invalid JSON at line 3, column 3");
  dir.write("config.json", std::string("[1, 2]"));
  EXPECT_HAS(error_of([&] { SafetensorsModel::open(dir.path().string()); }),
             "config is JSON array, expected an object");
  dir.write("config.json", kConfig);
  dir.write("model.safetensors", Bytes(3));
  e = error_of([&] { SafetensorsModel::open(dir.path().string()); });
  EXPECT_HAS(e, dir.file("model.safetensors"));
  EXPECT_HAS(e, "too small");
}

TEST(SafetensorsModel, UnsupportedDTypeNamedWhenUsed) {
  TempDir dir;
  dir.write("config.json", kConfig);
  dir.write("model.safetensors", safetensors_file({{"w", "F32", {1}, pattern_bytes(4)},
                                                   {"ids", "I32", {2}, pattern_bytes(8)}}));
  SafetensorsModel m = SafetensorsModel::open(dir.path().string());
  EXPECT_EQ(m.tensors().size(), 1u);
  EXPECT_HAS(error_of([&] { m.find_tensor("ids"); }), "tensor 'ids' has dtype I32");
  EXPECT_EQ(m.find_tensor("absent"), nullptr);
  EXPECT_HAS(error_of([&] { m.tensor("ids"); }), "tensor 'ids' has dtype I32, which ridge does not support");
}

TEST(ReadJsonFile, ErrorsNameFileAndPosition) {
  TempDir dir;
  std::string e = error_of([&] { read_json_file(dir.file("none.json")); });
  EXPECT_HAS(e, "cannot open '" + dir.file("none.json") + "'");
  std::string p = dir.write("bad.json", std::string("{\"a\": [1, 2,]}"));
  e = error_of([&] { read_json_file(p); });
  EXPECT_HAS(e, p);
  EXPECT_HAS(e, "invalid JSON at line 1, column 13 (byte 13)");
  p = dir.write("empty.json", std::string());
  EXPECT_HAS(error_of([&] { read_json_file(p); }), "invalid JSON at line 1, column 1");
  p = dir.write("ok.json", std::string("{\"k\": [1, \"two\"]}"));
  EXPECT_EQ(read_json_file(p)["k"][1], "two");
}

TEST(ReadJsonFile, DeepNestingIsRefusedWhileParsing) {
  TempDir dir;
  // The review's config.json: 200000 nested arrays overflowed the stack (SIGSEGV).
  const std::string deep = R"({"model_type":"llama","num_hidden_layers":)" +
                           std::string(200000, '[') + std::string(200000, ']') + "}";
  std::string p = dir.write("config.json", deep);
  EXPECT_HAS(error_of([&] { read_json_file(p); }), p + ": JSON nested deeper than 64 levels");
  // 64 nested containers (the object and 63 arrays) parse; 65 do not.
  p = dir.write("at64.json", "{\"k\": " + std::string(63, '[') + std::string(63, ']') + "}");
  EXPECT_TRUE(read_json_file(p)["k"].is_array());
  p = dir.write("at65.json", "{\"k\": " + std::string(64, '[') + std::string(64, ']') + "}");
  EXPECT_HAS(error_of([&] { read_json_file(p); }), "JSON nested deeper than 64 levels");
  // Objects count as well as arrays.
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\": ";
  objects += '1';
  objects.append(65, '}');
  p = dir.write("objects.json", objects);
  EXPECT_HAS(error_of([&] { read_json_file(p); }), "JSON nested deeper than 64 levels");
}

TEST(ReadJsonFile, NonRegularFilesAreRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto result =
      std::async(std::launch::async, [&] { return error_of([&] { read_json_file(fifo); }); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "read_json_file blocked on a FIFO";
    // Release the reader: a writer that opens and closes ends its open and its read.
    for (int i = 0;
         i < 100 && result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready;
         ++i) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  EXPECT_HAS(result.get(), "cannot read '" + fifo + "': not a regular file");
  // A folder is refused the same way (and a missing file is still "cannot open").
  EXPECT_HAS(error_of([&] { read_json_file(dir.path().string()); }), "not a regular file");
  EXPECT_HAS(error_of([&] { read_json_file(dir.file("none.json")); }), "cannot open");
}

}  // namespace
}  // namespace ridge::io
