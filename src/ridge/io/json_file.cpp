#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"

namespace ridge::io {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail("cannot read '{}': {}", path, std::strerror(errno));
  const std::string text = buf.str();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based and points one past the offending character.
    size_t upto = std::min(e.byte == 0 ? size_t(0) : size_t(e.byte - 1), text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < upto; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    fail("{}: invalid JSON at line {}, column {} (byte {}): {}", path, line, column, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    // A number too large for a double (1e400) is out_of_range.406, which has no position.
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

}  // namespace ridge::io
