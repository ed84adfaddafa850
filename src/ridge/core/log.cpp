#include "ridge/core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "ridge/core/error.h"

namespace ridge::log {

namespace {
std::atomic<int> g_level{int(Level::info)};
std::mutex g_mutex;
const auto g_start = std::chrono::steady_clock::now();
}  // namespace

void set_level(Level l) { g_level.store(int(l)); }
Level level() { return Level(g_level.load(std::memory_order_relaxed)); }

Level level_from_name(std::string_view name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "off") return Level::off;
  fail("unknown log level '{}' (expected debug, info, warn, error or off)", name);
}

void write(Level l, std::string_view message) {
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  std::lock_guard lock(g_mutex);
  fmt::print(stderr, "[{:8.3f}] {:5} {}\n", t, kNames[int(l)], message);
}

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, kUnits[u]);
}

}  // namespace ridge::log
