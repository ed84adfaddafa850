// SafetensorsModel: a Hugging Face model folder (config.json + one file or index + shards).
#include <algorithm>
#include <filesystem>
#include <set>

#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"

namespace ridge::io {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSingleFile = "model.safetensors";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The shard file names of an index, each checked to be a plain name inside the folder; and the
// tensor -> shard map.
struct Index {
  std::vector<std::string> shards;  // sorted, unique
  std::map<std::string, std::string, std::less<>> weight_map;
};

Index read_index(const fs::path& index_path) {
  const std::string ip = index_path.string();
  nlohmann::json j = read_json_file(ip);
  RIDGE_CHECK(j.is_object(), "{}: index is JSON {}, expected an object", ip, j.type_name());
  auto it = j.find("weight_map");
  RIDGE_CHECK(it != j.end(), "{}: index has no 'weight_map'", ip);
  RIDGE_CHECK(it->is_object(), "{}: 'weight_map' is JSON {}, expected an object", ip, it->type_name());
  Index index;
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : it->items()) {
    RIDGE_CHECK(shard.is_string(), "{}: weight_map entry '{}' is JSON {}, expected a file name",
                ip, tensor, shard.type_name());
    std::string s = shard.get<std::string>();
    RIDGE_CHECK(!s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
                    s.find('\\') == std::string::npos && s.find('\0') == std::string::npos,
                "{}: weight_map entry '{}' names shard '{}', expected a plain file name in the folder",
                ip, tensor, s);
    shards.insert(s);
    index.weight_map.emplace(tensor, std::move(s));
  }
  RIDGE_CHECK(!index.weight_map.empty(), "{}: 'weight_map' is empty", ip);
  index.shards.assign(shards.begin(), shards.end());
  return index;
}

}  // namespace

SafetensorsModel SafetensorsModel::open(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  const auto status = fs::status(p, ec);
  if (ec || !fs::exists(status)) fail("model path '{}' does not exist", path);

  fs::path dir;
  fs::path single;      // set when one .safetensors file holds the model
  fs::path index_path;  // set when sharded
  if (fs::is_directory(status)) {
    dir = p;
    if (is_regular(dir / kIndexFile)) {
      index_path = dir / kIndexFile;
    } else if (is_regular(dir / kSingleFile)) {
      single = dir / kSingleFile;
    } else {
      fail("model folder '{}' has neither {} nor {}", path, kSingleFile, kIndexFile);
    }
  } else {
    dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    if (ends_with(path, ".index.json")) {
      index_path = p;
    } else {
      single = p;
    }
  }

  SafetensorsModel m;
  m.dir_ = dir.string();
  const fs::path config = dir / "config.json";
  RIDGE_CHECK(is_regular(config), "model folder '{}' has no config.json (expected {})", m.dir_,
              config.string());
  m.config_ = read_json_file(config.string());
  RIDGE_CHECK(m.config_.is_object(), "{}: config is JSON {}, expected an object", config.string(),
              m.config_.type_name());

  // The shard each tensor is attributed to (sharded models), for checking the index.
  Index index;
  if (!single.empty()) {
    m.files_.push_back(SafetensorsFile::open(single.string()));
  } else {
    index = read_index(index_path);
    m.files_.reserve(index.shards.size());
    for (const auto& shard : index.shards) {
      const fs::path sp = dir / shard;
      if (!is_regular(sp)) {
        auto named = std::find_if(index.weight_map.begin(), index.weight_map.end(),
                                  [&](const auto& kv) { return kv.second == shard; });
        fail("{}: shard '{}' (holding tensor '{}') is missing: {} does not exist",
             index_path.string(), shard, named->first, sp.string());
      }
      m.files_.push_back(SafetensorsFile::open(sp.string()));
    }
  }

  // files_ no longer grows, so pointers into its tensors stay valid.
  std::map<std::string, const SafetensorsFile*, std::less<>> owner;  // tensor -> file, all dtypes
  for (const auto& f : m.files_) {
    for (const auto& info : f.tensor_infos()) {
      auto [it, inserted] = owner.emplace(info.name, &f);
      if (!inserted)
        fail("tensor '{}' is in both {} and {}", info.name, it->second->path(), f.path());
    }
    for (const auto& t : f.tensors()) {
      m.index_.emplace(t.name, &t);
      m.all_.push_back(&t);
    }
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    auto it = owner.find(tensor);
    const std::string want = (dir / shard).string();
    if (it == owner.end())
      fail("{}: tensor '{}' is said to be in shard '{}', but {} does not hold it",
           index_path.string(), tensor, shard, want);
    if (it->second->path() != want)
      fail("{}: tensor '{}' is said to be in shard '{}', but it is in {}", index_path.string(),
           tensor, shard, it->second->path());
  }
  return m;
}

const TensorData* SafetensorsModel::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return it->second;
  for (const auto& f : files_)
    if (f.find_tensor_info(name)) return f.find_tensor(name);  // throws naming the dtype
  return nullptr;
}

const TensorData& SafetensorsModel::tensor(std::string_view name) const {
  if (const TensorData* t = find_tensor(name)) return *t;
  fail("model '{}': tensor '{}' is not in any of its {} safetensors file(s)", dir_, name,
       files_.size());
}

}  // namespace ridge::io
