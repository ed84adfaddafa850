// ridge::Error: the one exception type of the library. Messages name the file, tensor, field or
// request parameter at fault and the expected vs actual value.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace ridge {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws ridge::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ridge

// RIDGE_CHECK(cond, "fmt", args...): throws ridge::Error when cond is false.
#define RIDGE_CHECK(cond, ...)       \
  do {                               \
    if (!(cond)) ::ridge::fail(__VA_ARGS__); \
  } while (0)
