#include "ridge/tune/build_cache.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <system_error>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/tune/record.h"

namespace ridge::tune {

namespace fs = std::filesystem;

std::string DeviceKey::text() const {
  return fmt::format("{}, {} SMs, driver {}, CUDA runtime {}, kernels {}", gpu_name, sm_count,
                     driver_version, cuda_runtime_version, kernel_version);
}

std::string DeviceKey::dir_name() const {
  // The text form joins fields with ", ", which a GPU name could contain; the hash covers each
  // field length-framed instead, so two different keys never share a directory by construction.
  detail::Record r;
  r.device = *this;
  const uint64_t h = fnv1a64(detail::canonical_payload(r));
  return fmt::format("{}-{}sm-{}", detail::file_name_safe(gpu_name, 40), sm_count,
                     detail::hex64(h).substr(0, 8));
}

fs::path default_cache_root() {
  if (const char* v = std::getenv("RIDGE_CACHE_ROOT"); v && *v) return fs::path(v);
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v && v[0] == '/')
    return fs::path(v) / "ridge";
  if (const char* v = std::getenv("HOME"); v && *v) return fs::path(v) / ".cache" / "ridge";
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir)
    return fs::path(pw->pw_dir) / ".cache" / "ridge";
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return tmp / fmt::format("ridge-cache-{}", ::getuid());
}

namespace {

std::string plural(uint64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

struct FileInfo {
  fs::path path;
  uint64_t bytes = 0;
  fs::file_time_type mtime;
};

// Every record file under <root>/tune; removes temp files older than an hour (a crashed writer's).
// Only ridge's own names count: device directories named like DeviceKey::dir_name, record and
// temp files named like record_path and write_atomic name them. Symlinks are never followed (a
// directory or file symlink may lead out of the root) and only regular files are taken. A file
// with a record's name that is not ridge's (is_owned_record: valid JSON without ridge's fields)
// is left out: it never counts toward the caps and so is never evicted.
std::vector<FileInfo> scan_records(const fs::path& tree) {
  std::vector<FileInfo> out;
  std::error_code ec;
  const auto stale_before = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator dirs(tree, ec), end; !ec && dirs != end; dirs.increment(ec)) {
    std::error_code e2;
    if (dirs->symlink_status(e2).type() != fs::file_type::directory || e2) continue;
    if (!detail::is_device_dir_name(dirs->path().filename().string())) continue;
    for (fs::directory_iterator it(dirs->path(), e2); !e2 && it != end; it.increment(e2)) {
      const std::string name = it->path().filename().string();
      std::error_code e3;
      const bool is_record = detail::is_record_name(name);
      if (!is_record && !detail::is_temp_name(name)) continue;
      if (it->symlink_status(e3).type() != fs::file_type::regular || e3) continue;
      const auto mtime = it->last_write_time(e3);
      if (e3) continue;  // gone since the listing
      if (!is_record) {
        if (mtime < stale_before) fs::remove(it->path(), e3);
        continue;
      }
      const auto size = it->file_size(e3);
      if (e3) continue;
      if (!detail::is_owned_record(it->path())) continue;  // someone else's JSON, or gone
      out.push_back({it->path(), uint64_t(size), mtime});
    }
  }
  return out;
}

}  // namespace

BuildCache::BuildCache(CacheConfig config, DeviceKey device)
    : config_(std::move(config)), device_(std::move(device)) {
  if (config_.root.empty()) config_.root = default_cache_root();
  dir_ = config_.root / detail::kTreeName / device_.dir_name();
}

fs::path BuildCache::record_path(std::string_view kind, std::string_view key) const {
  std::string joined(kind);
  joined += '\0';
  joined += key;
  return dir_ / fmt::format("{}-{}.json", detail::file_name_safe(kind, 40),
                            detail::hex64(fnv1a64(joined)));
}

std::optional<std::string> BuildCache::get(std::string_view kind, std::string_view key) {
  const fs::path path = record_path(kind, key);
  std::string text, why;
  switch (detail::read_small_file(path, text, why)) {
    case detail::ReadStatus::missing:
      misses_++;
      return std::nullopt;
    case detail::ReadStatus::error:
      log::warn("build cache: ignoring {}: {}", path.string(), why);
      ignored_corrupt_++;
      misses_++;
      return std::nullopt;
    case detail::ReadStatus::ok:
      break;
  }
  detail::Record r;
  switch (detail::decode(text, r, why)) {
    case detail::Decoded::corrupt:
      log::warn("build cache: ignoring corrupt record {}: {}", path.string(), why);
      ignored_corrupt_++;
      misses_++;
      return std::nullopt;
    case detail::Decoded::foreign_format:
      log::warn("build cache: ignoring foreign record {}: {}", path.string(), why);
      ignored_foreign_++;
      misses_++;
      return std::nullopt;
    case detail::Decoded::ok:
      break;
  }
  if (r.device != device_) {
    log::warn("build cache: ignoring foreign record {}: made for device '{}', this is '{}'",
              path.string(), r.device.text(), device_.text());
    ignored_foreign_++;
    misses_++;
    return std::nullopt;
  }
  if (r.kind != kind || r.key != key) {
    // Two keys whose names hash alike: the later put replaces the record; not worth a warning.
    log::debug("build cache: {} holds ({}, {}), not ({}, {})", path.string(), r.kind, r.key, kind,
               key);
    misses_++;
    return std::nullopt;
  }
  detail::touch(path);  // LRU: a hit is a use (a failure only ages the record)
  hits_++;
  return std::move(r.value);
}

void BuildCache::warn_write_failure(const std::string& what) {
  write_failures_++;
  if (!warned_write_.exchange(true))
    log::warn("build cache: {} (tuning results are not kept; further failures at debug level)",
              what);
  else
    log::debug("build cache: {}", what);
}

void BuildCache::put(std::string_view kind, std::string_view key, std::string_view value) {
  detail::Record r;
  r.device = device_;
  r.kind = std::string(kind);
  r.key = std::string(key);
  r.value = std::string(value);
  r.created = detail::unix_now();
  std::string text;
  try {
    text = detail::encode(r);
  } catch (const std::exception& e) {
    warn_write_failure(fmt::format("cannot store: {}", e.what()));
    return;
  }
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    warn_write_failure(fmt::format("cannot create '{}': {}", dir_.string(), ec.message()));
    return;
  }
  const fs::path path = record_path(kind, key);
  std::error_code size_ec;
  const uintmax_t old_size = fs::file_size(path, size_ec);
  const bool existed = !size_ec;
  std::string why;
  if (!detail::write_atomic(path, text, why)) {
    warn_write_failure(why);
    return;
  }
  writes_++;
  {
    std::lock_guard lock(caps_mutex_);
    if (scanned_) {
      if (!existed) records_++;
      bytes_ = bytes_ + text.size() - (existed ? std::min<uint64_t>(old_size, bytes_) : 0);
    }
  }
  enforce_caps(path);
}

void BuildCache::enforce_caps(const fs::path& just_written) {
  std::lock_guard lock(caps_mutex_);
  if (scanned_ && records_ <= config_.max_records && bytes_ <= config_.max_bytes) return;
  std::vector<FileInfo> files = scan_records(config_.root / detail::kTreeName);
  scanned_ = true;
  records_ = files.size();
  bytes_ = 0;
  for (const auto& f : files) bytes_ += f.bytes;
  if (records_ <= config_.max_records && bytes_ <= config_.max_bytes) return;
  // Oldest first; the record just written last whatever its mtime; ties by path (stable order).
  std::sort(files.begin(), files.end(), [&](const FileInfo& a, const FileInfo& b) {
    const bool an = a.path == just_written, bn = b.path == just_written;
    if (an != bn) return bn;
    if (a.mtime != b.mtime) return a.mtime < b.mtime;
    return a.path < b.path;
  });
  size_t removed = 0;
  for (const auto& f : files) {
    if (records_ <= config_.max_records && bytes_ <= config_.max_bytes) break;
    std::error_code ec;
    // Only ridge's records are here (scan_records checked each one's content, not just its name).
    const bool gone = fs::remove(f.path, ec);
    if (ec) {
      log::debug("build cache: cannot evict {}: {}", f.path.string(), ec.message());
      continue;
    }
    // Not removed and no error: gone since the scan (another process evicted it). Either way it
    // no longer counts.
    if (gone) {
      evictions_++;
      removed++;
    }
    records_--;
    bytes_ -= std::min(bytes_, f.bytes);
  }
  if (removed > 0)
    log::debug("build cache: evicted {} (caps: {} records, {})",
               plural(removed, "record", "records"), config_.max_records,
               log::format_bytes(double(config_.max_bytes)));
}

CacheStats BuildCache::stats() const {
  CacheStats s;
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.writes = writes_.load();
  s.write_failures = write_failures_.load();
  s.ignored_corrupt = ignored_corrupt_.load();
  s.ignored_foreign = ignored_foreign_.load();
  s.evictions = evictions_.load();
  return s;
}

std::string BuildCache::summary() const {
  const CacheStats s = stats();
  std::string out =
      fmt::format("build cache {}: {}, {}, {}", dir_.string(), plural(s.hits, "hit", "hits"),
                  plural(s.misses, "miss", "misses"), plural(s.writes, "write", "writes"));
  if (s.write_failures) out += fmt::format(" ({} failed)", s.write_failures);
  if (s.ignored_corrupt || s.ignored_foreign)
    out += fmt::format(", ignored {} corrupt and {} foreign", s.ignored_corrupt, s.ignored_foreign);
  out += fmt::format(", {} evicted", s.evictions);
  return out;
}

}  // namespace ridge::tune
