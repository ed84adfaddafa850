// ridge_chat_template_tool: the parity harness's renderer. Reads JSON lines
//   {"template": "...", "messages": [...], "add_generation_prompt": bool,
//    "bos_token": "...", "eos_token": "...", "variables": {...optional extra variables...}}
// and writes one JSON line per request: {"output": "..."} or {"error": "...", "kind":
// "syntax"|"runtime"|"raised"}. Templates are parsed once and cached by source.
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ridge/tokenizer/chat_template.h"
#include "ridge/tokenizer/jinja/error.h"

namespace {

using nlohmann::ordered_json;
using ridge::tokenizer::jinja::TemplateError;

const char* kind_name(TemplateError::Kind k) {
  switch (k) {
    case TemplateError::Kind::syntax:
      return "syntax";
    case TemplateError::Kind::runtime:
      return "runtime";
    case TemplateError::Kind::raised:
      return "raised";
  }
  return "runtime";
}

ordered_json handle(const std::string& line,
                    std::map<std::string, std::unique_ptr<ridge::tokenizer::ChatTemplate>>& cache) {
  ordered_json reply;
  try {
    const ordered_json req = ordered_json::parse(line);
    const std::string source = req.at("template").get<std::string>();
    auto it = cache.find(source);
    if (it == cache.end()) {
      it = cache.emplace(source, std::make_unique<ridge::tokenizer::ChatTemplate>(source)).first;
    }
    ordered_json vars = ordered_json::object();
    vars["messages"] = req.value("messages", ordered_json::array());
    vars["add_generation_prompt"] = req.value("add_generation_prompt", false);
    vars["bos_token"] = req.value("bos_token", std::string());
    vars["eos_token"] = req.value("eos_token", std::string());
    if (req.contains("variables")) {
      for (auto v = req["variables"].begin(); v != req["variables"].end(); ++v)
        vars[v.key()] = v.value();
    }
    reply["output"] = it->second->render_variables(vars);
  } catch (const TemplateError& e) {
    reply["error"] = e.what();
    reply["kind"] = kind_name(e.kind());
    reply["line"] = e.line();
    reply["column"] = e.column();
  } catch (const std::exception& e) {
    reply["error"] = e.what();
    reply["kind"] = "request";
  }
  return reply;
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::map<std::string, std::unique_ptr<ridge::tokenizer::ChatTemplate>> cache;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << handle(line, cache).dump(-1, ' ', false, ordered_json::error_handler_t::replace)
              << '\n'
              << std::flush;
  }
  return 0;
}
