#include "ridge/tune/record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"

namespace ridge::tune {

uint64_t fnv1a64(std::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace ridge::tune

namespace ridge::tune::detail {

namespace {

using nlohmann::json;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The bytes file_name_safe keeps: [A-Za-z0-9._-].
bool is_safe_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

void append_field(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

bool get_string(const json& j, const char* name, std::string& out, std::string& why) {
  auto it = j.find(name);
  if (it == j.end()) {
    why = fmt::format("field '{}' is missing", name);
    return false;
  }
  if (!it->is_string()) {
    why = fmt::format("field '{}' is not a string", name);
    return false;
  }
  out = it->get<std::string>();
  return true;
}

template <typename Int>
bool get_int(const json& j, const char* name, Int& out, std::string& why) {
  auto it = j.find(name);
  if (it == j.end()) {
    why = fmt::format("field '{}' is missing", name);
    return false;
  }
  if (!it->is_number_integer()) {
    why = fmt::format("field '{}' is not an integer", name);
    return false;
  }
  if (it->is_number_unsigned()) {
    const auto v = it->get<uint64_t>();
    if (v > uint64_t(std::numeric_limits<Int>::max())) {
      why = fmt::format("field '{}' is out of range", name);
      return false;
    }
    out = Int(v);
    return true;
  }
  const auto v = it->get<int64_t>();
  if (v < int64_t(std::numeric_limits<Int>::min()) ||
      v > int64_t(std::numeric_limits<Int>::max())) {
    why = fmt::format("field '{}' is out of range", name);
    return false;
  }
  out = Int(v);
  return true;
}

std::string checksum_text(const Record& r) {
  return "fnv1a64:" + hex64(fnv1a64(canonical_payload(r)));
}

timespec now_timespec() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

}  // namespace

std::string hex64(uint64_t v) {
  return fmt::format("{:016x}", v);
}

std::string canonical_payload(const Record& r) {
  std::string out;
  append_field(out, std::to_string(r.format));
  append_field(out, r.device.gpu_name);
  append_field(out, std::to_string(r.device.sm_count));
  append_field(out, std::to_string(r.device.driver_version));
  append_field(out, std::to_string(r.device.cuda_runtime_version));
  append_field(out, r.device.kernel_version);
  append_field(out, r.kind);
  append_field(out, r.key);
  append_field(out, r.value);
  append_field(out, std::to_string(r.created));
  return out;
}

std::string encode(const Record& r) {
  json j;
  j["format"] = r.format;
  j["device"] = {{"gpu_name", r.device.gpu_name},
                 {"sm_count", r.device.sm_count},
                 {"driver_version", r.device.driver_version},
                 {"cuda_runtime_version", r.device.cuda_runtime_version},
                 {"kernel_version", r.device.kernel_version}};
  j["kind"] = r.kind;
  j["key"] = r.key;
  j["value"] = r.value;
  j["created"] = r.created;
  j["checksum"] = checksum_text(r);
  try {
    return j.dump(1) + "\n";
  } catch (const json::exception& e) {
    fail("record ({}, {}) is not valid UTF-8: {}", r.kind, r.key, e.what());
  }
}

Decoded decode(std::string_view text, Record& out, std::string& why) {
  if (text.empty()) {
    why = "empty file";
    return Decoded::corrupt;
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    why = "not valid JSON (truncated or overwritten?)";
    return Decoded::corrupt;
  }
  if (!j.is_object()) {
    why = "not a JSON object";
    return Decoded::corrupt;
  }
  Record r;
  if (!get_int(j, "format", r.format, why)) return Decoded::corrupt;
  if (r.format != kCacheFormatVersion) {
    why =
        fmt::format("record format {}, this build reads format {}", r.format, kCacheFormatVersion);
    return Decoded::foreign_format;
  }
  auto dev = j.find("device");
  if (dev == j.end() || !dev->is_object()) {
    why = "field 'device' is missing or not an object";
    return Decoded::corrupt;
  }
  DeviceKey& d = r.device;
  if (!get_string(*dev, "gpu_name", d.gpu_name, why) ||
      !get_int(*dev, "sm_count", d.sm_count, why) ||
      !get_int(*dev, "driver_version", d.driver_version, why) ||
      !get_int(*dev, "cuda_runtime_version", d.cuda_runtime_version, why) ||
      !get_string(*dev, "kernel_version", d.kernel_version, why))
    return Decoded::corrupt;
  std::string checksum;
  if (!get_string(j, "kind", r.kind, why) || !get_string(j, "key", r.key, why) ||
      !get_string(j, "value", r.value, why) || !get_int(j, "created", r.created, why) ||
      !get_string(j, "checksum", checksum, why))
    return Decoded::corrupt;
  const std::string expected = checksum_text(r);
  if (checksum != expected) {
    why = fmt::format("checksum mismatch (stored {}, computed {})", checksum, expected);
    return Decoded::corrupt;
  }
  out = std::move(r);
  return Decoded::ok;
}

std::string file_name_safe(std::string_view s, size_t max_len) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max_len) break;
    out += is_safe_byte(c) ? char(c) : '_';
  }
  // A leading '.' would hide the file (and mark it as a temp file).
  if (!out.empty() && out[0] == '.') out[0] = '_';
  if (out.empty()) out = "_";
  return out;
}

ReadStatus read_small_file(const std::filesystem::path& path, std::string& out, std::string& why) {
  // O_NONBLOCK: opening a FIFO (or a device) blocks until a writer comes, possibly forever; the
  // S_ISREG check below refuses anything that is not a regular file right after the open. For a
  // regular file O_NONBLOCK changes nothing, so the reads below need no fcntl to clear it.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return ReadStatus::missing;
    why = fmt::format("cannot open: {}", std::strerror(errno));
    return ReadStatus::error;
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) {
    why = fmt::format("cannot stat: {}", std::strerror(errno));
    return ReadStatus::error;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
    return ReadStatus::error;
  }
  if (uint64_t(st.st_size) > kMaxRecordBytes) {
    why = fmt::format("{} bytes, larger than any record ({} bytes at most)", st.st_size,
                      kMaxRecordBytes);
    return ReadStatus::error;
  }
  out.assign(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(f.fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      why = fmt::format("cannot read: {}", std::strerror(errno));
      return ReadStatus::error;
    }
    if (n == 0) break;  // shrank under us: what was read is checked like any other content
    done += size_t(n);
  }
  out.resize(done);
  return ReadStatus::ok;
}

bool write_atomic(const std::filesystem::path& path, std::string_view text, std::string& why) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  const std::filesystem::path dir = path.parent_path();
  const std::filesystem::path tmp =
      dir / fmt::format(".{}.tmp.{}.{:x}", path.filename().string(), ::getpid(),
                        fnv1a64(std::to_string(counter.fetch_add(1)), salt));
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (f.fd < 0) {
    why = fmt::format("cannot create '{}': {}", tmp.string(), std::strerror(errno));
    return false;
  }
  auto abandon = [&](std::string reason) {
    why = std::move(reason);
    ::close(f.fd);
    f.fd = -1;
    ::unlink(tmp.c_str());
    return false;
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(f.fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return abandon(fmt::format("cannot write '{}': {}", tmp.string(), std::strerror(errno)));
    }
    done += size_t(n);
  }
  if (::fsync(f.fd) != 0)
    return abandon(fmt::format("cannot fsync '{}': {}", tmp.string(), std::strerror(errno)));
  const timespec now = now_timespec();
  const timespec times[2] = {now, now};
  ::futimens(f.fd, times);  // best effort: the kernel's own mtime is coarser (LRU ties)
  if (::close(f.fd) != 0) {
    f.fd = -1;
    ::unlink(tmp.c_str());
    why = fmt::format("cannot close '{}': {}", tmp.string(), std::strerror(errno));
    return false;
  }
  f.fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    why = fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), path.string(),
                      std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  // Durable rename: fsync the directory (best effort; some file systems refuse).
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
  return true;
}

bool touch(const std::filesystem::path& path) {
  const timespec now = now_timespec();
  const timespec times[2] = {now, now};
  return ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
}

namespace {

// What file_name_safe(s, max_len) can return for some s.
bool is_safe_part(std::string_view s, size_t max_len) {
  return !s.empty() && s.size() <= max_len && s[0] != '.' &&
         std::all_of(s.begin(), s.end(), is_safe_byte);
}

bool is_lower_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool is_record_name(const std::string& name) {
  // <file_name_safe(kind, 40)>-<16 hex>.json (BuildCache::record_path)
  constexpr std::string_view kExt = ".json";
  constexpr size_t kTail = 1 + 16 + kExt.size();
  const std::string_view n = name;
  if (n.size() <= kTail || !n.ends_with(kExt)) return false;
  return n[n.size() - kTail] == '-' && is_lower_hex(n.substr(n.size() - kTail + 1, 16)) &&
         is_safe_part(n.substr(0, n.size() - kTail), 40);
}

bool is_temp_name(const std::string& name) {
  // .<record name>.tmp.<pid>.<hex> (write_atomic)
  if (name.size() < 2 || name[0] != '.') return false;
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at < 1 || !is_record_name(name.substr(1, at - 1))) return false;
  const std::string_view rest = std::string_view(name).substr(at + 5);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view pid = rest.substr(0, dot), hex = rest.substr(dot + 1);
  return pid.size() <= 20 && is_digits(pid) && hex.size() <= 16 && is_lower_hex(hex);
}

bool is_device_dir_name(const std::string& name) {
  // <file_name_safe(gpu_name, 40)>-<SMs>sm-<8 hex> (DeviceKey::dir_name)
  constexpr std::string_view kSm = "sm-";
  std::string_view n = name;
  if (n.size() < 8 + kSm.size() || !is_lower_hex(n.substr(n.size() - 8))) return false;
  n.remove_suffix(8);
  if (!n.ends_with(kSm)) return false;
  n.remove_suffix(kSm.size());
  size_t digits = 0;
  while (digits < n.size() && n[n.size() - 1 - digits] >= '0' && n[n.size() - 1 - digits] <= '9')
    digits++;
  if (digits == 0 || digits > 10) return false;
  n.remove_suffix(digits);
  if (!n.ends_with('-')) return false;
  n.remove_suffix(1);
  if (is_safe_part(n, 40)) return true;
  // A negative SM count: "<name>--<N>sm-<hex>".
  return n.ends_with('-') && is_safe_part(n.substr(0, n.size() - 1), 40);
}

bool is_owned_record_text(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return true;  // not JSON: a torn or truncated record (or garbage)
  if (!j.is_object()) return false;
  const auto format = j.find("format");
  if (format != j.end() && format->is_number_integer()) return true;
  const auto checksum = j.find("checksum");
  return checksum != j.end() && checksum->is_string() &&
         checksum->get_ref<const std::string&>().starts_with("fnv1a64:");
}

bool is_owned_record(const std::filesystem::path& path) {
  // Never a symlink, FIFO, device or directory, whatever its name.
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::string text, why;
  switch (read_small_file(path, text, why)) {
    case ReadStatus::missing:
      return false;
    case ReadStatus::error:
      return true;  // unreadable or too large for a record: corrupt, and it has ridge's name
    case ReadStatus::ok:
      break;
  }
  return is_owned_record_text(text);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace ridge::tune::detail
