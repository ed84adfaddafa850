#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"

namespace ridge::io {

namespace {

// Real config and index files nest 3 or 4 levels; much deeper input is refused while parsing,
// before recursive code (dump, destructors, the loaders) can run out of stack on it.
constexpr int kMaxJsonDepth = 64;

}  // namespace

std::string describe_json(const nlohmann::json& value) {
  if (value.is_structured()) return value.type_name();
  std::string text = value.dump();
  if (text.size() > 64) {
    size_t cut = 61;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

nlohmann::json read_json_file(const std::string& path) {
  // A FIFO or device would block the open or the read forever: only regular files are read.
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    fail("cannot read '{}': not a regular file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail("cannot read '{}': {}", path, std::strerror(errno));
  const std::string text = buf.str();
  // `depth` counts the containers already open, so the start of a 65th nested one is refused.
  auto depth_limit = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth)
      fail("{}: JSON nested deeper than {} levels", path, kMaxJsonDepth);
    return true;
  };
  try {
    return nlohmann::json::parse(text, depth_limit);
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
