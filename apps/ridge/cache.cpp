// ridge cache: the build cache of tuned kernel choices (src/ridge/tune, docs/KERNELS.md
// "Autotuner and build cache").
//   ridge cache ls [--cache-root DIR] [--json]        every record, grouped by device
//   ridge cache clear [--cache-root DIR] [--device D]  removes records (all, or one device's)
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/log.h"
#include "ridge/tune/build_cache.h"
#include "subcommand.h"

namespace {

namespace fs = std::filesystem;
using ridge::tune::BuildCache;
using ridge::tune::CacheEntryInfo;

struct CacheFlags {
  std::string root;
  bool json = false;
  std::string device;
};

fs::path root_of(const CacheFlags& f) {
  return f.root.empty() ? ridge::tune::default_cache_root() : fs::path(f.root);
}

void add_root_option(CLI::App& sub, CacheFlags& f) {
  sub.add_option("--cache-root", f.root,
                 "the cache root (default: $RIDGE_CACHE_ROOT, else $XDG_CACHE_HOME/ridge, else "
                 "~/.cache/ridge)");
}

// A tuning result shows as its winner and time; other values as their first 60 characters.
std::string value_summary(const std::string& value) {
  const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    const auto w = j.find("winner");
    if (w != j.end() && w->is_string()) {
      std::string out = w->get<std::string>();
      if (auto s = j.find("seconds"); s != j.end() && s->is_number())
        out += fmt::format(" ({:.2f} us)", s->get<double>() * 1e6);
      return out;
    }
  }
  std::string out;
  for (char c : value) out += (c == '\n' || c == '\t' || c == '\r') ? ' ' : c;
  if (out.size() > 60) out = out.substr(0, 57) + "...";
  return out;
}

std::string format_age(double s) {
  if (s < 120) return fmt::format("{:.0f} s", s);
  if (s < 7200) return fmt::format("{:.0f} min", s / 60);
  if (s < 2 * 86400) return fmt::format("{:.0f} h", s / 3600);
  return fmt::format("{:.0f} d", s / 86400);
}

nlohmann::json to_json(const fs::path& root, const std::vector<CacheEntryInfo>& entries) {
  nlohmann::json records = nlohmann::json::array();
  uint64_t bytes = 0;
  for (const auto& e : entries) {
    bytes += e.bytes;
    nlohmann::json r = {{"path", e.path.string()},
                        {"device_dir", e.device_dir},
                        {"device", e.device},
                        {"kind", e.kind},
                        {"key", e.key},
                        {"value", e.value},
                        {"bytes", e.bytes},
                        {"age_seconds", e.age_seconds},
                        {"created", e.created},
                        {"corrupt", e.corrupt},
                        {"foreign", e.foreign},
                        {"problem", e.problem}};
    records.push_back(std::move(r));
  }
  return {{"root", root.string()}, {"records", records}, {"total_bytes", bytes}};
}

void list(const CacheFlags& f) {
  const fs::path root = root_of(f);
  const std::vector<CacheEntryInfo> entries = BuildCache::list(root);
  if (f.json) {
    // Replacement characters for bytes that are not UTF-8 (a corrupt record's fields).
    fmt::print(
        "{}\n",
        to_json(root, entries).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  fmt::print("cache root: {}\n", root.string());
  if (entries.empty()) {
    fmt::print("no records\n");
    return;
  }
  // Grouped by device directory (list() sorts by it).
  uint64_t bytes = 0;
  size_t corrupt = 0, foreign = 0;
  for (size_t begin = 0; begin < entries.size();) {
    size_t end = begin;
    std::string device;
    while (end < entries.size() && entries[end].device_dir == entries[begin].device_dir) {
      if (device.empty()) device = entries[end].device;
      ++end;
    }
    fmt::print("\n{} [{}]\n", device.empty() ? "(unknown device)" : device,
               entries[begin].device_dir);
    struct Row {
      std::string kind, key, value, size, age;
    };
    std::vector<Row> rows{{"KIND", "KEY", "VALUE", "SIZE", "AGE"}};
    for (size_t i = begin; i < end; ++i) {
      const CacheEntryInfo& e = entries[i];
      bytes += e.bytes;
      corrupt += e.corrupt;
      foreign += e.foreign;
      Row r;
      if (e.corrupt || e.foreign) {
        r.kind = e.kind.empty() ? "?" : e.kind;
        r.key = e.key.empty() ? e.path.filename().string() : e.key;
        r.value = fmt::format("{}: {}", e.corrupt ? "CORRUPT" : "FOREIGN", e.problem);
      } else {
        r.kind = e.kind;
        r.key = e.key;
        r.value = value_summary(e.value);
      }
      r.size = ridge::log::format_bytes(double(e.bytes));
      r.age = format_age(e.age_seconds);
      rows.push_back(std::move(r));
    }
    size_t wk = 0, wy = 0, wv = 0, ws = 0;
    for (const auto& r : rows) {
      wk = std::max(wk, r.kind.size());
      wy = std::max(wy, r.key.size());
      wv = std::max(wv, r.value.size());
      ws = std::max(ws, r.size.size());
    }
    for (const auto& r : rows)
      fmt::print("  {:<{}}  {:<{}}  {:<{}}  {:>{}}  {}\n", r.kind, wk, r.key, wy, r.value, wv,
                 r.size, ws, r.age);
    begin = end;
  }
  fmt::print("\n{} record{}, {}", entries.size(), entries.size() == 1 ? "" : "s",
             ridge::log::format_bytes(double(bytes)));
  if (corrupt || foreign) fmt::print(" ({} corrupt, {} foreign)", corrupt, foreign);
  fmt::print("\n");
}

void clear(const CacheFlags& f) {
  const fs::path root = root_of(f);
  const ridge::tune::ClearResult r = BuildCache::clear(root, f.device);
  fmt::print("removed {} record{} ({}) from {}{}\n", r.records, r.records == 1 ? "" : "s",
             ridge::log::format_bytes(double(r.bytes)), (root / "tune").string(),
             f.device.empty() ? "" : fmt::format(" for device '{}'", f.device));
  if (r.failed) {
    fmt::print(stderr, "error: {} file{} could not be removed\n", r.failed,
               r.failed == 1 ? "" : "s");
    throw ridge::app::Exit{1};
  }
}

void setup(CLI::App& sub) {
  sub.require_subcommand(1);
  auto f = std::make_shared<CacheFlags>();
  CLI::App* ls = sub.add_subcommand("ls", "List the cached records, grouped by device");
  add_root_option(*ls, *f);
  ls->add_flag("--json", f->json, "print JSON (every field, full values)");
  ls->callback([f] { list(*f); });

  CLI::App* cl = sub.add_subcommand("clear", "Remove cached records (all devices unless --device)");
  add_root_option(*cl, *f);
  cl->add_option("--device", f->device,
                 "only this device's records: its directory name or device text as `ls` shows");
  cl->callback([f] { clear(*f); });
}

const ridge::app::Registrar reg("cache", "The build cache of tuned kernel choices: ls, clear",
                                &setup);

}  // namespace
