#include "ridge/tune/build_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ridge/tune/record.h"
#include "tune/tune_test_util.h"

namespace ridge::tune {
namespace {

namespace fs = std::filesystem;
using namespace testing;
using ::testing::internal::CaptureStderr;
using ::testing::internal::GetCapturedStderr;

TEST(Fnv1a64, KnownVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(DeviceKey, StableTextAndDirectory) {
  const DeviceKey k = h200("3");
  EXPECT_EQ(k.text(), "NVIDIA H200, 132 SMs, driver 13000, CUDA runtime 13000, kernels 3");
  // Golden: the directory name must not change between builds (it would orphan every record).
  EXPECT_EQ(k.dir_name(), "NVIDIA_H200-132sm-f4dcd15c");
  DeviceKey other = k;
  EXPECT_EQ(other, k);
  for (auto change :
       {+[](DeviceKey& d) { d.gpu_name += "x"; }, +[](DeviceKey& d) { d.sm_count++; },
        +[](DeviceKey& d) { d.driver_version++; }, +[](DeviceKey& d) { d.cuda_runtime_version++; },
        +[](DeviceKey& d) { d.kernel_version = "4"; }}) {
    DeviceKey d = k;
    change(d);
    EXPECT_NE(d, k);
    EXPECT_NE(d.dir_name(), k.dir_name());
  }
  // Odd names stay file-name safe.
  DeviceKey odd{"../We/ird: GPU*", 1, 2, 3, "v"};
  const std::string dir = odd.dir_name();
  EXPECT_EQ(dir.find('/'), std::string::npos);
  EXPECT_NE(dir[0], '.');
}

TEST(DefaultCacheRoot, Environment) {
  auto saved = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto root = saved("RIDGE_CACHE_ROOT"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  ::setenv("RIDGE_CACHE_ROOT", "/r/oot", 1);
  ::setenv("XDG_CACHE_HOME", "/x/dg", 1);
  ::setenv("HOME", "/h/ome", 1);
  EXPECT_EQ(default_cache_root(), fs::path("/r/oot"));
  ::unsetenv("RIDGE_CACHE_ROOT");
  EXPECT_EQ(default_cache_root(), fs::path("/x/dg/ridge"));
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // not absolute: ignored, as the XDG spec says
  EXPECT_EQ(default_cache_root(), fs::path("/h/ome/.cache/ridge"));
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_root(), fs::path("/h/ome/.cache/ridge"));
  ::unsetenv("HOME");
  EXPECT_FALSE(default_cache_root().empty());
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v)
      ::setenv(n, v->c_str(), 1);
    else
      ::unsetenv(n);
  };
  restore("RIDGE_CACHE_ROOT", root);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST(BuildCache, EmptyConfigRootUsesDefault) {
  TempRoot t;
  ::setenv("RIDGE_CACHE_ROOT", t.path().c_str(), 1);
  BuildCache c(CacheConfig{}, h200());
  ::unsetenv("RIDGE_CACHE_ROOT");
  EXPECT_EQ(c.config().root, t.path());
  EXPECT_EQ(c.directory(), t.path() / "tune" / h200().dir_name());
}

TEST(BuildCache, RoundTripAndCounts) {
  TempRoot t;
  BuildCache c(config_at(t.path()), h200());
  EXPECT_EQ(c.get("gemm", "m1.n4096.k4096.bf16"), std::nullopt);
  EXPECT_FALSE(fs::exists(t.path() / "tune"));  // a get creates nothing
  const std::string value = "{\"winner\":\"a\"}\n\t\"quoted\" \xc3\xa9 \\ end";
  c.put("gemm", "m1.n4096.k4096.bf16", value);
  c.put("gemm", "m2.n4096.k4096.bf16", "two");
  c.put("attention", "m1.n4096.k4096.bf16", "other kind, same key");
  EXPECT_EQ(c.get("gemm", "m1.n4096.k4096.bf16"), value);
  EXPECT_EQ(c.get("gemm", "m2.n4096.k4096.bf16"), "two");
  EXPECT_EQ(c.get("attention", "m1.n4096.k4096.bf16"), "other kind, same key");
  EXPECT_EQ(c.get("gemm", "m4.n4096.k4096.bf16"), std::nullopt);
  c.put("gemm", "m2.n4096.k4096.bf16", "replaced");
  EXPECT_EQ(c.get("gemm", "m2.n4096.k4096.bf16"), "replaced");
  const CacheStats s = c.stats();
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.writes, 4u);
  EXPECT_EQ(s.ignored_corrupt + s.ignored_foreign + s.evictions + s.write_failures, 0u);
  EXPECT_EQ(files_under(t.path()).size(), 3u);  // no temp files left
  EXPECT_NE(c.summary().find("4 hits, 2 misses, 4 writes"), std::string::npos) << c.summary();
  // The record holds everything the header promises.
  const std::string text = read_text(c.record_path("gemm", "m1.n4096.k4096.bf16"));
  for (const char* field :
       {"\"format\"", "\"device\"", "\"gpu_name\"", "\"kernel_version\"", "\"kind\"", "\"key\"",
        "\"value\"", "\"created\"", "\"checksum\": \"fnv1a64:"})
    EXPECT_NE(text.find(field), std::string::npos) << field << " in " << text;
}

TEST(BuildCache, SecondInstanceSeesEntriesAndOtherDevicesDoNot) {
  TempRoot t;
  {
    BuildCache first(config_at(t.path()), h200());
    first.put("gemm", "k", "v");
  }
  BuildCache second(config_at(t.path()), h200());
  EXPECT_EQ(second.get("gemm", "k"), "v");
  BuildCache newer_kernels(config_at(t.path()), h200("2"));
  CaptureStderr();
  EXPECT_EQ(newer_kernels.get("gemm", "k"), std::nullopt);  // its own directory: a plain miss
  EXPECT_EQ(GetCapturedStderr(), "");
  newer_kernels.put("gemm", "k", "v2");
  EXPECT_EQ(second.get("gemm", "k"), "v");  // both builds keep their records
  EXPECT_EQ(newer_kernels.get("gemm", "k"), "v2");
}

// Writes `text` over (kind, key)'s record, checks the get is a miss with a warning naming the
// file and `reason`, then that a put replaces it.
void expect_ignored(BuildCache& c, const std::string& text, const std::string& reason,
                    bool foreign) {
  SCOPED_TRACE(reason);
  const fs::path p = c.record_path("gemm", "k");
  write_text(p, text);
  const CacheStats before = c.stats();
  CaptureStderr();
  EXPECT_EQ(c.get("gemm", "k"), std::nullopt);
  const std::string err = GetCapturedStderr();
  EXPECT_NE(err.find("warn"), std::string::npos) << err;
  EXPECT_NE(err.find(p.string()), std::string::npos) << err;
  EXPECT_NE(err.find(reason), std::string::npos) << err;
  const CacheStats after = c.stats();
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.ignored_corrupt, before.ignored_corrupt + (foreign ? 0 : 1));
  EXPECT_EQ(after.ignored_foreign, before.ignored_foreign + (foreign ? 1 : 0));
  c.put("gemm", "k", "fresh");
  EXPECT_EQ(c.get("gemm", "k"), "fresh");
}

TEST(BuildCache, CorruptRecordsAreIgnoredWithAWarningAndOverwritten) {
  TempRoot t;
  BuildCache c(config_at(t.path()), h200());
  c.put("gemm", "k", "good value");
  const std::string good = read_text(c.record_path("gemm", "k"));

  expect_ignored(c, std::string("\x00\xff\xfe garbage \x01", 13), "not valid JSON", false);
  expect_ignored(c, good.substr(0, good.size() / 2), "not valid JSON", false);  // truncated
  expect_ignored(c, "", "empty file", false);
  expect_ignored(c, "[1, 2]", "not a JSON object", false);
  {
    std::string flipped = good;  // value changed, checksum kept
    flipped.replace(flipped.find("good value"), 10, "evil value");
    expect_ignored(c, flipped, "checksum mismatch", false);
  }
  {
    std::string bad_sum = good;  // checksum changed
    const size_t at = bad_sum.find("fnv1a64:") + 8;
    bad_sum[at] = bad_sum[at] == '0' ? '1' : '0';
    expect_ignored(c, bad_sum, "checksum mismatch", false);
  }
  {
    std::string wrong_type = good;
    wrong_type.replace(wrong_type.find("\"sm_count\": 132"), 15, "\"sm_count\": \"132\"");
    expect_ignored(c, wrong_type, "'sm_count' is not an integer", false);
  }
  {
    std::string missing = good;
    missing.replace(missing.find("\"kind\""), 6, "\"kink\"");
    expect_ignored(c, missing, "'kind' is missing", false);
  }
  expect_ignored(c, std::string(size_t(2) << 20, ' '), "larger than any record", false);
  EXPECT_EQ(c.stats().ignored_corrupt, 9u);
}

TEST(BuildCache, ForeignRecordsAreIgnoredWithAWarning) {
  TempRoot t;
  BuildCache c(config_at(t.path()), h200());
  c.put("gemm", "k", "x");  // creates the directory
  detail::Record r;
  r.device = h200("0.9");  // an older kernel version's record, copied into this directory
  r.kind = "gemm";
  r.key = "k";
  r.value = "old";
  r.created = 1;
  expect_ignored(c, detail::encode(r), "made for device", true);
  r.device = {"NVIDIA A100-SXM4-80GB", 108, 12040, 12040, "1"};
  expect_ignored(c, detail::encode(r), "NVIDIA A100", true);
  expect_ignored(c, R"({"format": 7, "anything": "else"})", "record format 7", true);
  EXPECT_EQ(c.stats().ignored_foreign, 3u);
}

// Records k0 .. k{n-1} ("v"), written ten hours ago a minute apart: k0 the least recently used.
void put_aged_records(BuildCache& c, int n) {
  const auto base = fs::file_time_type::clock::now() - std::chrono::hours(10);
  for (int i = 0; i < n; ++i) {
    c.put("gemm", fmt::format("k{}", i), "v");
    fs::last_write_time(c.record_path("gemm", fmt::format("k{}", i)),
                        base + std::chrono::minutes(i));
  }
}

TEST(BuildCache, CapOnRecordsEvictsLeastRecentlyUsed) {
  TempRoot t;
  CacheConfig cfg = config_at(t.path());
  cfg.max_records = 3;
  BuildCache c(cfg, h200());
  put_aged_records(c, 3);
  EXPECT_EQ(c.get("gemm", "k0"), "v");  // k0 is now the most recently used; k1 the least
  c.put("gemm", "k3", "v");
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_FALSE(fs::exists(c.record_path("gemm", "k1")));
  c.put("gemm", "k4", "v");
  EXPECT_FALSE(fs::exists(c.record_path("gemm", "k2")));
  for (const char* k : {"k0", "k3", "k4"}) EXPECT_EQ(c.get("gemm", k), "v") << k;
  EXPECT_EQ(c.stats().evictions, 2u);
  EXPECT_EQ(files_under(t.path()).size(), 3u);
  // A second instance (another process) starts from a scan and also holds the cap.
  BuildCache other(cfg, h200("2"));
  other.put("gemm", "z", "v");
  EXPECT_EQ(files_under(t.path()).size(), 3u);
  EXPECT_TRUE(fs::exists(other.record_path("gemm", "z")));
}

TEST(BuildCache, CapOnBytesEvictsLeastRecentlyUsed) {
  TempRoot t;
  CacheConfig cfg = config_at(t.path());
  BuildCache probe(cfg, h200());
  probe.put("gemm", "k0", std::string(1000, 'a'));
  const uint64_t one = fs::file_size(probe.record_path("gemm", "k0"));
  cfg.max_bytes = one * 5 / 2;  // room for two records
  BuildCache c(cfg, h200());
  const auto base = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(c.record_path("gemm", "k0"), base);
  c.put("gemm", "k1", std::string(1000, 'b'));
  EXPECT_EQ(c.stats().evictions, 0u);
  c.put("gemm", "k2", std::string(1000, 'c'));
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_FALSE(fs::exists(c.record_path("gemm", "k0")));
  EXPECT_EQ(c.get("gemm", "k1"), std::string(1000, 'b'));
  EXPECT_EQ(c.get("gemm", "k2"), std::string(1000, 'c'));
  // A record larger than the whole cap is not kept (it is removed last, after the others).
  cfg.max_bytes = 100;
  BuildCache tiny(cfg, h200());
  tiny.put("gemm", "big", std::string(1000, 'd'));
  EXPECT_EQ(tiny.get("gemm", "big"), std::nullopt);
  EXPECT_TRUE(files_under(t.path()).empty());
}

// Every file under the root is a valid record whose value is one of `allowed`.
void expect_only_valid_records(const fs::path& root, const std::set<std::string>& allowed) {
  for (const auto& p : files_under(root)) {
    const std::string name = p.filename().string();
    EXPECT_TRUE(detail::is_record_name(name)) << "left over: " << p;
    detail::Record r;
    std::string why;
    ASSERT_EQ(detail::decode(read_text(p), r, why), detail::Decoded::ok) << p << ": " << why;
    EXPECT_TRUE(allowed.count(r.value)) << r.value;
  }
}

TEST(BuildCache, ConcurrentThreadsWriteAndReadOnlyValidRecords) {
  TempRoot t;
  BuildCache shared(config_at(t.path()), h200());
  std::set<std::string> allowed;
  for (int th = 0; th < 6; ++th)
    for (int i = 0; i < 40; ++i)
      allowed.insert(fmt::format("thread {} value {} {}", th, i, std::string(size_t(i * 37), 'x')));
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 6; ++th) {
    threads.emplace_back([&, th] {
      // Half the threads share one instance, the others have their own (as separate engines).
      BuildCache own(config_at(t.path()), h200());
      BuildCache& c = th % 2 ? shared : own;
      for (int i = 0; i < 40; ++i) {
        const std::string key = fmt::format("k{}", i % 5);
        c.put("gemm", key,
              fmt::format("thread {} value {} {}", th, i, std::string(size_t(i * 37), 'x')));
        if (auto v = c.get("gemm", fmt::format("k{}", (i + 2) % 5)); v && !allowed.count(*v)) bad++;
      }
      if (c.stats().ignored_corrupt) bad++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(shared.stats().ignored_corrupt, 0u);
  expect_only_valid_records(t.path(), allowed);
  EXPECT_EQ(files_under(t.path()).size(), 5u);
}

TEST(BuildCache, TwoProcessesWritingAtOnceLeaveOnlyValidRecords) {
  TempRoot t;
  std::set<std::string> allowed;
  for (int p = 0; p < 3; ++p)
    for (int i = 0; i < 150; ++i) allowed.insert(fmt::format("process {} value {}", p, i));
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      {
        BuildCache c(config_at(t.path()), h200());
        for (int i = 0; i < 150; ++i) {
          c.put("gemm", fmt::format("k{}", i % 7), fmt::format("process {} value {}", p, i));
          c.get("gemm", fmt::format("k{}", (i + 3) % 7));
        }
        if (c.stats().ignored_corrupt || c.stats().write_failures) rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  BuildCache c(config_at(t.path()), h200());
  for (int i = 0; i < 150; ++i) {
    c.put("gemm", fmt::format("k{}", i % 7), fmt::format("process 2 value {}", i));
    if (auto v = c.get("gemm", fmt::format("k{}", (i + 5) % 7))) {
      EXPECT_TRUE(allowed.count(*v));
    }
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_EQ(c.stats().ignored_corrupt, 0u);
  expect_only_valid_records(t.path(), allowed);
  EXPECT_EQ(files_under(t.path()).size(), 7u);
}

TEST(BuildCache, UnwritableRootWarnsOnceAndNeverThrows) {
  TempRoot t;
  write_text(t.path() / "not-a-dir", "x");
  BuildCache c(config_at(t.path() / "not-a-dir" / "cache"), h200());
  CaptureStderr();
  EXPECT_NO_THROW(c.put("gemm", "a", "1"));
  EXPECT_NO_THROW(c.put("gemm", "b", "2"));
  EXPECT_EQ(c.get("gemm", "a"), std::nullopt);
  const std::string err = GetCapturedStderr();
  EXPECT_NE(err.find("cannot create"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot create"), err.rfind("cannot create")) << "warned twice:\n" << err;
  EXPECT_EQ(c.stats().write_failures, 2u);
  EXPECT_EQ(c.stats().writes, 0u);
  EXPECT_NE(c.summary().find("(2 failed)"), std::string::npos) << c.summary();
  // A record path that is a directory reads as an unusable record, not a crash.
  TempRoot t2;
  BuildCache d(config_at(t2.path()), h200());
  fs::create_directories(d.record_path("gemm", "a"));
  CaptureStderr();
  EXPECT_EQ(d.get("gemm", "a"), std::nullopt);
  EXPECT_NO_THROW(d.put("gemm", "a", "1"));
  const std::string err2 = GetCapturedStderr();
  EXPECT_NE(err2.find("not a regular file"), std::string::npos) << err2;
  EXPECT_NE(err2.find("cannot rename"), std::string::npos) << err2;
}

TEST(BuildCache, ListAndClear) {
  TempRoot t;
  EXPECT_TRUE(BuildCache::list(t.path() / "missing").empty());
  EXPECT_EQ(BuildCache::clear(t.path() / "missing").records, 0u);
  BuildCache a(config_at(t.path()), h200());
  BuildCache b(config_at(t.path()), DeviceKey{"NVIDIA H100 80GB HBM3", 132, 12080, 12040, "1"});
  a.put("gemm", "m1", "va1");
  a.put("gemm", "m2", "va2");
  b.put("gemm", "m1", "vb1");
  write_text(a.directory() / "gemm-0000000000000000.json", "{broken");
  write_text(a.directory() / ".gemm-0123456789abcdef.json.tmp.1.2", "half written");
  write_text(t.path() / "tune" / "README", "not ours");

  const auto entries = BuildCache::list(t.path());
  ASSERT_EQ(entries.size(), 4u);
  int corrupt = 0;
  for (const auto& e : entries) {
    if (e.corrupt) {
      corrupt++;
      EXPECT_NE(e.problem.find("not valid JSON"), std::string::npos);
      continue;
    }
    EXPECT_EQ(e.kind, "gemm");
    EXPECT_FALSE(e.foreign);
    EXPECT_GT(e.bytes, 100u);
    EXPECT_GE(e.age_seconds, 0);
    EXPECT_LT(e.age_seconds, 600);
    EXPECT_GT(e.created, 1700000000);
    if (e.device_dir == a.device().dir_name()) {
      EXPECT_EQ(e.device, a.device().text());
      EXPECT_TRUE(e.value == "va1" || e.value == "va2");
    } else {
      EXPECT_EQ(e.device, b.device().text());
      EXPECT_EQ(e.value, "vb1");
    }
  }
  EXPECT_EQ(corrupt, 1);

  // Clear one device by its key's text: the other device's records stay.
  ClearResult r = BuildCache::clear(t.path(), b.device().text());
  EXPECT_EQ(r.records, 1u);
  EXPECT_GT(r.bytes, 100u);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_FALSE(fs::exists(b.directory()));
  EXPECT_EQ(a.get("gemm", "m1"), "va1");
  // By the device key (its directory): the corrupt record and the temp file go too.
  r = BuildCache::clear(t.path(), a.device());
  EXPECT_EQ(r.records, 3u);
  EXPECT_FALSE(fs::exists(a.directory()));
  EXPECT_TRUE(fs::exists(t.path() / "tune" / "README"));  // files that are not ours stay
  a.put("gemm", "m1", "again");
  b.put("gemm", "m1", "again");
  r = BuildCache::clear(t.path());
  EXPECT_EQ(r.records, 2u);
  EXPECT_TRUE(BuildCache::list(t.path()).empty());
  EXPECT_EQ(BuildCache::clear(t.path(), "no such device").records, 0u);
}

// A tree under a cache root holding ridge's records next to things that are not ridge's: a
// project directory with JSON files, symlinks out of the root (one named like a device
// directory), foreign files inside a device directory, and files whose names only resemble
// ridge's. Every path here must survive `cache clear` and eviction.
struct ForeignTree {
  fs::path root, outside, outside2;
  std::vector<std::pair<fs::path, std::string>> foreign;  // (path, content) that must survive
  std::vector<fs::path> links;                            // symlinks that must survive

  ForeignTree(const fs::path& base, const DeviceKey& ours) {
    root = base / "R";
    outside = base / "O";
    outside2 = base / "O2";
    const fs::path tune = root / "tune";
    const fs::path own = tune / ours.dir_name();
    for (const auto& d : {tune / "proj", outside, outside2, own}) fs::create_directories(d);
    // The reproducer: a project's config.json, and a symlink out of the root.
    add(tune / "proj" / "config.json", "{}\n");
    add(outside / "important.json", "{}\n");
    link(outside, tune / "link");
    // A symlink named exactly like a device directory, to a directory holding a real ridge
    // record (a copy) and a ridge temp file name: nothing behind a symlink is ever touched.
    detail::Record r;
    r.device = ours;
    r.kind = "gemm";
    r.key = "outside";
    r.value = "v";
    r.created = 1;
    add(outside2 / "gemm-0123456789abcdef.json", detail::encode(r));
    add(outside2 / ".gemm-0123456789abcdef.json.tmp.1.2", "temp-looking");
    link(outside2, tune / "NVIDIA_H200-132sm-00000000");
    link(outside2, tune / "zz");
    // Ridge-like names in a directory that is not named like ridge's.
    add(tune / "proj" / "gemm-0123456789abcdef.json", detail::encode(r));
    add(tune / "proj" / ".gemm-0123456789abcdef.json.tmp.1.2", "x");
    // Foreign files in ridge's own directory: other names, a JSON file with a record-like
    // name that is no ridge record, a temp-looking file of another name, a symlinked record
    // name pointing out of the root.
    add(own / "notes.json", "{\"mine\": true}\n");
    add(own / "config-0123456789abcdef.json", "{}\n");
    add(own / ".notes.json.tmp.1.2", "x");
    add(own / "GEMM-0123456789ABCDEF.json", "{}\n");
    link(outside / "important.json", own / "gemm-fedcba9876543210.json");
    // Old enough to go first under LRU if they were (wrongly) taken for records, and for temp
    // files to count as a crashed writer's.
    const auto old = fs::file_time_type::clock::now() - std::chrono::hours(100);
    for (const auto& [p, text] : foreign) fs::last_write_time(p, old);
  }

  void add(const fs::path& p, const std::string& text) {
    write_text(p, text);
    foreign.emplace_back(p, text);
  }
  void link(const fs::path& target, const fs::path& at) {
    fs::create_symlink(target, at);
    links.push_back(at);
  }

  void expect_intact() const {
    for (const auto& [p, text] : foreign) {
      EXPECT_TRUE(fs::exists(p)) << p << " was removed";
      EXPECT_EQ(read_text(p), text) << p;
    }
    for (const auto& l : links) EXPECT_TRUE(fs::is_symlink(l)) << l << " was removed";
  }
};

TEST(BuildCache, ClearRemovesOnlyRidgeRecordsAndNeverFollowsSymlinks) {
  TempRoot t;
  // The review's reproducer alone: nothing of ridge's there, so nothing is removed.
  {
    const fs::path r = t.path() / "plain" / "R", o = t.path() / "plain" / "O";
    fs::create_directories(r / "tune" / "proj");
    fs::create_directories(o);
    write_text(r / "tune" / "proj" / "config.json", "{}\n");
    write_text(o / "important.json", "{}\n");
    fs::create_symlink(o, r / "tune" / "link");
    EXPECT_TRUE(BuildCache::list(r).empty());
    const ClearResult res = BuildCache::clear(r);
    EXPECT_EQ(res.records, 0u);
    EXPECT_EQ(res.failed, 0u);
    EXPECT_EQ(read_text(r / "tune" / "proj" / "config.json"), "{}\n");
    EXPECT_EQ(read_text(o / "important.json"), "{}\n");
    EXPECT_TRUE(fs::is_symlink(r / "tune" / "link"));
    EXPECT_TRUE(fs::exists(r / "tune"));
  }
  // With ridge's records among the foreign files: only the records go.
  ForeignTree tree(t.path(), h200());
  BuildCache a(config_at(tree.root), h200());
  a.put("gemm", "m1", "va1");
  a.put("gemm", "m2", "va2");
  const fs::path corrupt = a.directory() / "gemm-1111111111111111.json";
  write_text(corrupt, "{\"format\": 1, \"kind\": \"gemm\"");  // a truncated record: ridge's
  const fs::path temp = a.directory() / ".gemm-1111111111111111.json.tmp.7.ab";
  write_text(temp, "half written");
  // ls shows what clear removes: the two records and the corrupt one, not config-<hex>.json
  // (a record's name, but someone else's JSON, which clear keeps).
  const auto listed = BuildCache::list(tree.root);
  EXPECT_EQ(listed.size(), 3u);
  for (const auto& e : listed) {
    EXPECT_EQ(e.path.parent_path(), a.directory()) << e.path;
    EXPECT_NE(e.path.filename(), "config-0123456789abcdef.json");
  }
  const ClearResult res = BuildCache::clear(tree.root);
  EXPECT_EQ(res.records, 3u);  // m1, m2 and the corrupt record
  EXPECT_EQ(res.failed, 0u);
  EXPECT_FALSE(fs::exists(a.record_path("gemm", "m1")));
  EXPECT_FALSE(fs::exists(a.record_path("gemm", "m2")));
  EXPECT_FALSE(fs::exists(corrupt));
  EXPECT_FALSE(fs::exists(temp));
  tree.expect_intact();
  EXPECT_TRUE(fs::is_directory(a.directory()));  // not empty: the foreign files are still there
  // Clearing by device leaves them too.
  a.put("gemm", "m3", "va3");
  EXPECT_EQ(BuildCache::clear(tree.root, h200()).records, 1u);
  EXPECT_EQ(BuildCache::clear(tree.root, h200().text()).records, 0u);
  tree.expect_intact();
  // An empty device directory of ridge's name goes; an empty one of another name stays.
  BuildCache b(config_at(tree.root), h200("2"));
  b.put("gemm", "k", "v");
  fs::create_directories(tree.root / "tune" / "empty");
  EXPECT_EQ(BuildCache::clear(tree.root).records, 1u);
  EXPECT_FALSE(fs::exists(b.directory()));
  EXPECT_TRUE(fs::is_directory(tree.root / "tune" / "empty"));
  tree.expect_intact();
}

TEST(BuildCache, EvictionRemovesOnlyRidgeRecordsAndNeverFollowsSymlinks) {
  for (const bool by_bytes : {false, true}) {
    SCOPED_TRACE(by_bytes ? "byte cap" : "record cap");
    TempRoot t;
    ForeignTree tree(t.path(), h200());
    // A crashed writer's temp file of ridge's: the first scan removes it.
    BuildCache probe(config_at(t.path() / "probe"), h200());
    probe.put("gemm", "k0", "v");
    const uint64_t one = fs::file_size(probe.record_path("gemm", "k0"));
    const fs::path stale =
        tree.root / "tune" / h200().dir_name() / ".gemm-2222222222222222.json.tmp.9.ff";
    write_text(stale, "half written");
    fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));

    CacheConfig cfg = config_at(tree.root);
    if (by_bytes)
      cfg.max_bytes = one * 3 + one / 2;  // room for three records
    else
      cfg.max_records = 3;
    BuildCache c(cfg, h200());
    put_aged_records(c, 3);
    // The foreign files count for nothing: three records fit.
    EXPECT_EQ(c.stats().evictions, 0u);
    EXPECT_FALSE(fs::exists(stale));
    c.put("gemm", "k3", "v");
    c.put("gemm", "k4", "v");
    EXPECT_EQ(c.stats().evictions, 2u);
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k0")));
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k1")));
    for (const char* k : {"k2", "k3", "k4"}) EXPECT_EQ(c.get("gemm", k), "v") << k;
    tree.expect_intact();
    // A second instance starts from a scan and holds the cap the same way.
    BuildCache other(cfg, h200("2"));
    other.put("gemm", "z", "v");
    EXPECT_EQ(other.stats().evictions, 1u);
    EXPECT_EQ(other.get("gemm", "z"), "v");
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k2")));
    tree.expect_intact();
  }
}

// A user's JSON file with a record's name, newer than every record: it is no record, so it never
// counts toward the caps, and no record is evicted to make room for it (nor is it evicted).
TEST(BuildCache, ForeignFileWithARecordNameNewestOfAllCountsForNothing) {
  for (const bool by_bytes : {false, true}) {
    SCOPED_TRACE(by_bytes ? "byte cap" : "record cap");
    TempRoot t;
    BuildCache fill(config_at(t.path()), h200());  // no caps to speak of
    put_aged_records(fill, 3);
    const uint64_t one = fs::file_size(fill.record_path("gemm", "k0"));
    // As large as a record, so that under either cap it would displace one if it counted.
    const fs::path mine = fill.directory() / "config-0123456789abcdef.json";
    const std::string text = fmt::format("{{\"mine\": \"{}\"}}\n", std::string(one, 'x'));
    write_text(mine, text);
    fs::last_write_time(mine, fs::file_time_type::clock::now() + std::chrono::hours(1));

    CacheConfig cfg = config_at(t.path());
    if (by_bytes)
      cfg.max_bytes = one * 3 + one / 2;  // room for three records
    else
      cfg.max_records = 3;
    BuildCache c(cfg, h200());
    c.put("gemm", "k3", "v");  // four records: only the oldest goes
    EXPECT_EQ(c.stats().evictions, 1u);
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k0")));
    for (const char* k : {"k1", "k2", "k3"}) EXPECT_EQ(c.get("gemm", k), "v") << k;
    c.put("gemm", "k4", "v");
    EXPECT_EQ(c.stats().evictions, 2u);
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k1")));
    for (const char* k : {"k2", "k3", "k4"}) EXPECT_EQ(c.get("gemm", k), "v") << k;
    EXPECT_EQ(read_text(mine), text);
    EXPECT_EQ(files_under(t.path()).size(), 4u);  // k2, k3, k4 and the user's file
    // A second instance starts from a scan and counts the same three records.
    BuildCache other(cfg, h200());
    other.put("gemm", "k5", "v");
    EXPECT_EQ(other.stats().evictions, 1u);
    EXPECT_FALSE(fs::exists(c.record_path("gemm", "k2")));
    for (const char* k : {"k3", "k4", "k5"}) EXPECT_EQ(other.get("gemm", k), "v") << k;
    EXPECT_EQ(read_text(mine), text);
    // ls and clear agree: three records listed and removed, the user's file neither.
    EXPECT_EQ(BuildCache::list(t.path()).size(), 3u);
    EXPECT_EQ(BuildCache::clear(t.path()).records, 3u);
    EXPECT_EQ(read_text(mine), text);
  }
}

TEST(BuildCache, FifoAtARecordPathIsAMissNotAHang) {
  TempRoot t;
  BuildCache c(config_at(t.path()), h200());
  c.put("gemm", "other", "v");  // creates the directory
  const fs::path p = c.record_path("gemm", "k");
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << std::strerror(errno);
  CaptureStderr();
  auto got = std::async(std::launch::async, [&] { return c.get("gemm", "k"); });
  if (got.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Release the reader blocked on the FIFO (a writer's open wakes it) so the test can end.
    const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
    got.wait();
    GetCapturedStderr();
    FAIL() << "get() on a FIFO did not return within 10 s";
  }
  EXPECT_EQ(got.get(), std::nullopt);
  const std::string err = GetCapturedStderr();
  EXPECT_NE(err.find("warn"), std::string::npos) << err;
  EXPECT_NE(err.find(p.string()), std::string::npos) << err;
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
  EXPECT_EQ(c.stats().ignored_corrupt, 1u);
  EXPECT_EQ(c.stats().misses, 1u);
  // A put replaces it with a record; list and clear skip it without opening it.
  c.put("gemm", "k", "fresh");
  EXPECT_EQ(c.get("gemm", "k"), "fresh");
  ASSERT_TRUE(fs::remove(p));
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0);
  EXPECT_EQ(BuildCache::list(t.path()).size(), 1u);
  EXPECT_EQ(BuildCache::clear(t.path()).records, 1u);
  EXPECT_EQ(fs::symlink_status(p).type(), fs::file_type::fifo);
}

}  // namespace
}  // namespace ridge::tune
