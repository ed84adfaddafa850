// Logging: leveled, to stderr, thread safe. The level is the only global mutable state.
#pragma once

#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace ridge::log {

enum class Level : int { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

void set_level(Level level);
Level level();
// Parses "debug|info|warn|error|off"; throws ridge::Error otherwise.
Level level_from_name(std::string_view name);
void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::error) write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

// "1.23 GiB"
std::string format_bytes(double bytes);

}  // namespace ridge::log
