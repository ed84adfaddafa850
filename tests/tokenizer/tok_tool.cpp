// ridge_tok_tool: the tokenizer behind a JSON-lines pipe, for the parity tests.
//
//   ridge_tok_tool --gguf model.gguf | --hf tokenizer.json|folder
//
// One request per stdin line, one response per stdout line:
//   {"op":"encode","text":s,"add_special":b,"parse_special":b}  -> {"ids":[...]}
//   {"op":"decode","ids":[...],"skip_special":b}                 -> {"text":s}
//   {"op":"stream","ids":[...],"skip_special":b}                 -> {"pieces":[hex...],"flush":hex}
//       (IncrementalDecoder: the bytes of every push() and of flush(), hex-encoded so the caller
//       can check that each one is whole UTF-8 on its own)
//   {"op":"token_bytes","ids":[...]}                             -> {"bytes":[hex...]}
//   {"op":"info"}                                                -> vocabulary facts
//   {"op":"time_encode","text":s,"repeat":n}    -> {"seconds":best
//   wall,"cpu_seconds":best,"ids":count}
// A failed request answers {"error":message} and the tool goes on.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/io/gguf.h"
#include "ridge/tokenizer/tokenizer.h"

using nlohmann::json;
using ridge::tokenizer::IncrementalDecoder;
using ridge::tokenizer::TokenId;
using ridge::tokenizer::Tokenizer;

namespace {

std::string hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    out.push_back(digits[static_cast<uint8_t>(c) >> 4]);
    out.push_back(digits[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::vector<TokenId> ids_of(const json& request) {
  return request.at("ids").get<std::vector<TokenId>>();
}

json answer(const Tokenizer& tok, const json& request) {
  const std::string op = request.at("op").get<std::string>();
  if (op == "encode") {
    const std::string text = request.at("text").get<std::string>();
    return {{"ids", tok.encode(text, request.value("add_special", true),
                               request.value("parse_special", true))}};
  }
  if (op == "decode") {
    return {{"text", tok.decode(ids_of(request), request.value("skip_special", false))}};
  }
  if (op == "stream") {
    IncrementalDecoder decoder(tok, request.value("skip_special", false));
    json pieces = json::array();
    for (TokenId id : ids_of(request)) pieces.push_back(hex(decoder.push(id)));
    return {{"pieces", pieces}, {"flush", hex(decoder.flush())}};
  }
  if (op == "token_bytes") {
    json bytes = json::array();
    for (TokenId id : ids_of(request)) bytes.push_back(hex(tok.token_bytes(id)));
    return {{"bytes", bytes}};
  }
  if (op == "info") {
    json special = json::array();
    for (size_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.is_special(static_cast<TokenId>(id))) special.push_back(id);
    }
    return {
        {"vocab_size", tok.vocab_size()},
        {"kind", tok.kind() == ridge::tokenizer::VocabKind::byte_level_bpe ? "byte_level_bpe"
                                                                           : "sentencepiece_bpe"},
        {"bos", tok.bos_id() ? json(*tok.bos_id()) : json()},
        {"eos", tok.eos_id() ? json(*tok.eos_id()) : json()},
        {"add_bos", tok.add_bos()},
        {"stop_ids", tok.stop_ids()},
        {"special_ids", special},
        {"chat_template_bytes", tok.chat_template().size()}};
  }
  if (op == "time_encode") {
    const std::string text = request.at("text").get<std::string>();
    const int repeat = request.value("repeat", 3);
    double best = 1e30;
    double best_cpu = 1e30;
    size_t count = 0;
    for (int i = 0; i < repeat; ++i) {
      const double cpu_start = thread_cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      count = tok.encode(text, false, true).size();
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      best = std::min(best, took.count());
      best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
    }
    // CPU time too: on a shared machine the wall clock also counts other processes.
    return {{"seconds", best}, {"cpu_seconds", best_cpu}, {"ids", count}};
  }
  throw ridge::Error("unknown op '" + op + "'");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string(argv[1]) != "--gguf" && std::string(argv[1]) != "--hf")) {
    std::fprintf(stderr, "usage: %s --gguf FILE | --hf TOKENIZER_JSON_OR_FOLDER\n", argv[0]);
    return 2;
  }
  std::optional<Tokenizer> tok;
  try {
    if (std::string(argv[1]) == "--gguf") {
      const auto gguf = ridge::io::GgufFile::open(argv[2]);
      tok.emplace(Tokenizer::from_gguf(gguf));
    } else {
      tok.emplace(Tokenizer::from_hf(argv[2]));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ridge_tok_tool: %s\n", e.what());
    std::cout << json{{"error", e.what()}}.dump() << std::endl;
    return 1;
  }
  std::cout << json{{"ready", true}}.dump() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json response;
    try {
      response = answer(*tok, json::parse(line));
    } catch (const std::exception& e) {
      response = {{"error", e.what()}};
    }
    std::cout << response.dump(-1, ' ', true, json::error_handler_t::replace) << '\n' << std::flush;
  }
  return 0;
}
