// BuildCache::list and BuildCache::clear: what `ridge cache ls` and `ridge cache clear` do.
#include <algorithm>
#include <chrono>
#include <optional>
#include <system_error>

#include "ridge/tune/build_cache.h"
#include "ridge/tune/record.h"

namespace ridge::tune {

namespace fs = std::filesystem;

namespace {

// The device directories under <root>/tune, sorted: real directories (never a symlink, which may
// lead out of the root) named the way DeviceKey::dir_name names them. Anything else there is not
// ridge's and is never entered.
std::vector<fs::path> device_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(root / detail::kTreeName, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code e2;
    if (it->symlink_status(e2).type() != fs::file_type::directory || e2) continue;
    if (detail::is_device_dir_name(it->path().filename().string())) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Regular files of one device directory (not symlinks, FIFOs, ...), sorted.
std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->symlink_status(e2).type() == fs::file_type::regular && !e2) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Removes `dir` when it is a real, empty directory (never a symlink, whatever it points to).
void remove_if_empty_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::symlink_status(dir, ec).type() != fs::file_type::directory || ec) return;
  fs::remove(dir, ec);  // fails when not empty, which is fine
}

// Reads and checks one file with a record's name (corrupt and foreign records flagged, never
// thrown). Nothing when it is not ridge's (valid JSON without ridge's fields, is_owned_record's
// test on the text read here) or gone: clear leaves such a file alone, so list does not show it.
std::optional<CacheEntryInfo> inspect(const fs::path& path, const std::string& device_dir) {
  CacheEntryInfo e;
  std::string text, why;
  switch (detail::read_small_file(path, text, why)) {
    case detail::ReadStatus::missing:
      return std::nullopt;  // gone while listing
    case detail::ReadStatus::error:
      e.corrupt = true;  // unreadable or too large: a corrupt record (clear removes it)
      e.problem = why;
      break;
    case detail::ReadStatus::ok:
      if (!detail::is_owned_record_text(text)) return std::nullopt;
      break;
  }
  e.path = path;
  e.device_dir = device_dir;
  std::error_code ec;
  e.bytes = fs::file_size(path, ec);
  if (ec) e.bytes = 0;
  const auto mtime = fs::last_write_time(path, ec);
  if (!ec)
    e.age_seconds = std::max(
        0.0, std::chrono::duration<double>(fs::file_time_type::clock::now() - mtime).count());
  if (e.corrupt) return e;
  detail::Record r;
  switch (detail::decode(text, r, why)) {
    case detail::Decoded::corrupt:
      e.corrupt = true;
      e.problem = why;
      return e;
    case detail::Decoded::foreign_format:
      e.foreign = true;
      e.problem = why;
      return e;
    case detail::Decoded::ok:
      break;
  }
  e.device = r.device.text();
  e.kind = std::move(r.kind);
  e.key = std::move(r.key);
  e.value = std::move(r.value);
  e.created = r.created;
  if (r.device.dir_name() != device_dir) {
    e.foreign = true;
    e.problem = "its device key does not belong in this directory";
  }
  return e;
}

}  // namespace

std::vector<CacheEntryInfo> BuildCache::list(const fs::path& root) {
  std::vector<CacheEntryInfo> out;
  try {
    for (const auto& dir : device_dirs(root)) {
      const std::string dir_name = dir.filename().string();
      std::vector<CacheEntryInfo> here;
      for (const auto& file : files_in(dir)) {
        if (!detail::is_record_name(file.filename().string())) continue;
        if (auto e = inspect(file, dir_name)) here.push_back(std::move(*e));
      }
      std::stable_sort(here.begin(), here.end(), [](const auto& a, const auto& b) {
        return std::tie(a.kind, a.key) < std::tie(b.kind, b.key);
      });
      for (auto& e : here) out.push_back(std::move(e));
    }
  } catch (const std::exception&) {
    // bad_alloc or a path conversion failure: list what was found so far
  }
  return out;
}

ClearResult BuildCache::clear(const fs::path& root, std::string_view device) {
  ClearResult result;
  try {
    for (const auto& dir : device_dirs(root)) {
      const bool whole_dir = device.empty() || dir.filename().string() == device;
      for (const auto& file : files_in(dir)) {
        const std::string name = file.filename().string();
        const bool record = detail::is_record_name(name);
        if (!record && !detail::is_temp_name(name)) continue;  // not ours: leave it
        if (!whole_dir) {
          // Only records whose device key's text is the one named.
          if (!record) continue;
          const auto e = inspect(file, dir.filename().string());
          if (!e || e->corrupt || e->device != device) continue;
        } else if (record && !detail::is_owned_record(file)) {
          continue;  // a record's name, but someone else's JSON (or gone): leave it
        }
        std::error_code size_ec, ec;
        const uintmax_t size = fs::file_size(file, size_ec);
        if (fs::remove(file, ec)) {
          if (record) {
            result.records++;
            result.bytes += size_ec ? 0 : uint64_t(size);
          }
        } else if (ec) {
          result.failed++;
        }
      }
      remove_if_empty_dir(dir);
    }
    remove_if_empty_dir(root / detail::kTreeName);
  } catch (const std::exception&) {
    result.failed++;
  }
  return result;
}

ClearResult BuildCache::clear(const fs::path& root, const DeviceKey& device) {
  return clear(root, device.dir_name());
}

}  // namespace ridge::tune
