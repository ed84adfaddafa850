// BuildCache: small records (a kernel choice per problem) persisted under a cache root, keyed by
// the device they were measured on, the way TensorRT-LLM's BuildCacheConfig(cache_root,
// max_records, max_cache_storage_gb) keeps built engines. CUDA-free: the CUDA backend fills the
// DeviceKey.
//
// Layout: <root>/tune/<device dir>/<kind>-<16 hex>.json, one file per record.
//   device dir = "<GPU name>-<SMs>sm-<8 hex>": the hex is FNV-1a 64 of the record format version
//     and the device key's text, so every (GPU, SM count, driver, CUDA, kernel version, format)
//     has its own directory and two ridge builds on one machine never overwrite each other.
//   file name  = the kind (file-name-safe) and FNV-1a 64 of kind + NUL + key.
// A record (JSON) holds the format version, the full device key, kind, key, value, creation time
// (Unix seconds) and "checksum": "fnv1a64:<16 hex>" over the canonical payload: every other field
// as <decimal byte length>:<bytes> in the fixed order format, gpu_name, sm_count,
// driver_version, cuda_runtime_version, kernel_version, kind, key, value, created.
//
// Writes are atomic: a temp file in the same directory, fsync, rename over the record, fsync of
// the directory; readers see the old record or the new one, never a mix, with any number of
// threads and processes writing at once (last writer wins). A record that cannot be used is
// ignored with a warning naming the file and the reason and counts as a miss; the next put
// overwrites it:
//   corrupt: unreadable, not JSON, a field missing or of the wrong type, checksum mismatch
//            (truncated files fail one of these);
//   foreign: another format version, device key, kind or key (a copied file, a hash collision).
// No method throws on I/O errors: get warns and misses, put warns (an unwritable cache root must
// not stop inference; after the first failure of an instance further failures log at debug).
//
// Caps: after a put, when this instance's running count of records or bytes under <root>/tune
// (all devices together; one scan at the first put, then its own writes added) passes
// max_records or max_bytes, the tree is scanned again and the least recently used records
// (oldest mtime; get touches a record it hits) are removed until both caps hold. The record just
// written is removed last, and only when it alone exceeds max_bytes. Another process's writes are
// seen at the next scan, so several processes writing at once may overshoot the caps until then.
//
// Ownership: <root>/tune may hold other things (a user's files, symlinks). Eviction, list and
// clear enter only real directories (never a symlink) named like a device dir above, and take
// only regular files named like a record ("<kind>-<16 hex>.json") or like write_atomic's temp
// files (".<record file name>.tmp.<pid>.<hex>"). A file with a record's name is removed only if
// it is a record or a corrupt one (not JSON, or JSON with ridge's "format" or "checksum"); valid
// JSON without them is someone else's and stays. Reads open with O_NONBLOCK, so a FIFO at a
// record path is refused at once (a corrupt record) instead of blocking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::tune {

// The record format this build reads and writes; records of another format are foreign.
inline constexpr int kCacheFormatVersion = 1;

// What a measurement depends on. The CUDA backend fills it from the device it runs on.
struct DeviceKey {
  std::string gpu_name;          // cudaDeviceProp::name, e.g. "NVIDIA H200"
  int sm_count = 0;              // multiprocessors
  int driver_version = 0;        // cudaDriverGetVersion, e.g. 13000
  int cuda_runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
  std::string kernel_version;    // ridge's kernel version: bump it when a kernel's speed changes

  // Stable text form, e.g. "NVIDIA H200, 132 SMs, driver 13000, CUDA runtime 13000, kernels 3".
  std::string text() const;
  // The record directory's name under <root>/tune (see the layout above).
  std::string dir_name() const;

  friend bool operator==(const DeviceKey&, const DeviceKey&) = default;
};

struct CacheConfig {
  std::filesystem::path root;  // the cache root (empty: default_cache_root())
  // Caps over every record under <root>/tune (all devices). A record is ~0.4 KiB, so 100,000
  // records (~40 MiB) bind before 256 MiB of bytes; the byte cap guards against large values.
  // One model's choices are a few hundred records (weight shapes x M buckets).
  size_t max_records = 100000;
  uint64_t max_bytes = uint64_t(256) << 20;
};

// $RIDGE_CACHE_ROOT, else $XDG_CACHE_HOME/ridge (when absolute), else $HOME/.cache/ridge, else
// the passwd entry's home/.cache/ridge, else <temp dir>/ridge-cache-<uid>.
std::filesystem::path default_cache_root();

// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t fnv1a64(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ULL);

struct CacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;  // includes the ignored records below
  uint64_t writes = 0;
  uint64_t write_failures = 0;
  uint64_t ignored_corrupt = 0;
  uint64_t ignored_foreign = 0;
  uint64_t evictions = 0;
};

// One record as found on disk (for `ridge cache ls`).
struct CacheEntryInfo {
  std::filesystem::path path;
  std::string device_dir;  // the directory it is in
  std::string device;      // its device key's text ("" when corrupt)
  std::string kind, key, value;
  uint64_t bytes = 0;
  double age_seconds = 0;  // since the last use (mtime)
  int64_t created = 0;     // Unix seconds, from the record
  bool corrupt = false;    // unreadable, not JSON, a bad field or checksum
  bool foreign = false;    // another format, or a device key that does not belong in its directory
  std::string problem;     // why it is corrupt or foreign
};

struct ClearResult {
  size_t records = 0;  // record files removed (corrupt ones included)
  uint64_t bytes = 0;  // their size
  size_t failed = 0;   // files that could not be removed
};

class BuildCache {
 public:
  // Never throws; the root is created at the first put.
  BuildCache(CacheConfig config, DeviceKey device);

  BuildCache(const BuildCache&) = delete;
  BuildCache& operator=(const BuildCache&) = delete;

  // The value stored for (kind, key) on this device, or nullopt (a miss). Touches the record's
  // mtime on a hit (LRU). Thread safe.
  std::optional<std::string> get(std::string_view kind, std::string_view key);
  // Stores (kind, key) -> value atomically, replacing what was there, then enforces the caps.
  // Thread safe. Warns on failure.
  void put(std::string_view kind, std::string_view key, std::string_view value);

  CacheStats stats() const;
  // One line for the log: "build cache <root>: 3 hits, 1 miss, 1 write, 0 ignored, 0 evicted".
  std::string summary() const;

  const CacheConfig& config() const { return config_; }
  const DeviceKey& device() const { return device_; }
  // <root>/tune/<device dir>
  const std::filesystem::path& directory() const { return dir_; }
  // Where (kind, key)'s record lives.
  std::filesystem::path record_path(std::string_view kind, std::string_view key) const;

  // Every record under <root>/tune (all devices), sorted by device dir, kind, key; unreadable
  // ones flagged corrupt. Like clear(), it skips a file with a record's name that is not
  // ridge's (see Ownership above): such a file is neither listed nor removed. A missing root
  // lists nothing. Never throws.
  static std::vector<CacheEntryInfo> list(const std::filesystem::path& root);
  // Removes the records under <root>/tune: all of them (device empty), or those of one device,
  // named by its directory name or its device key's text. Leftover temp files go too, and
  // device directories left empty (see Ownership above for what is never touched). Never throws.
  static ClearResult clear(const std::filesystem::path& root, std::string_view device = {});
  static ClearResult clear(const std::filesystem::path& root, const DeviceKey& device);

 private:
  void warn_write_failure(const std::string& what);
  void enforce_caps(const std::filesystem::path& just_written);

  CacheConfig config_;
  DeviceKey device_;
  std::filesystem::path dir_;

  std::atomic<uint64_t> hits_{0}, misses_{0}, writes_{0}, write_failures_{0};
  std::atomic<uint64_t> ignored_corrupt_{0}, ignored_foreign_{0}, evictions_{0};

  std::mutex caps_mutex_;  // guards the running totals and serializes scans
  bool scanned_ = false;
  size_t records_ = 0;
  uint64_t bytes_ = 0;
  std::atomic<bool> warned_write_{false};
};

}  // namespace ridge::tune
