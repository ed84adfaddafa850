// ridge run: one completion in the terminal, streamed; --json prints one JSON object instead.
// --prompt-ids takes the prompt as token ids; --batch-file runs many prompts in one process
// (JSON lines in: {"prompt": "..."} or {"prompt_ids": [...]}; JSON lines out, as --json).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/tokenizer/chat_template.h"
#include "subcommand.h"

namespace {

using namespace ridge;

struct RunFlags {
  engine::BundleOptions model;
  app::GenerationFlags gen;
  std::string prompt;
  bool prompt_given = false;  // --prompt on the command line (empty or not)
  std::vector<int32_t> prompt_ids;
  std::string batch_file;
  std::string system;
  bool chat = false;
  bool json = false;
  int top_logprobs = 0;
};

class Runner {
 public:
  Runner(RunFlags& f, engine::ModelBundle& b)
      : f_(f), b_(b), tok_(b.tokenizer.get()),
        gen_(*b.model, *b.kv_pool,
             tok_ ? tok_->stop_ids() : std::vector<int32_t>{}) {}

  std::vector<int32_t> encode(const std::string& text) const {
    RIDGE_CHECK(tok_, "this model has no tokenizer: give the prompt as token ids (--prompt-ids)");
    if (!f_.chat) return tok_->encode(text, /*add_special=*/true, /*parse_special=*/true);
    std::vector<tokenizer::ChatMessage> messages;
    if (!f_.system.empty()) messages.push_back({"system", f_.system});
    messages.push_back({"user", text});
    const std::string& src =
        tok_->chat_template().empty() ? tokenizer::default_chat_template() : tok_->chat_template();
    tokenizer::ChatTemplate tmpl(src);
    const std::string bos = tok_->bos_id() ? tok_->token_text(*tok_->bos_id()) : "";
    const std::string eos = tok_->eos_id() ? tok_->token_text(*tok_->eos_id()) : "";
    return tok_->encode(tmpl.render(messages, true, bos, eos), false, true);
  }

  // Generates for one prompt; streams text unless json; returns the JSON record.
  nlohmann::json generate(const std::vector<int32_t>& prompt, bool stream_text) {
    std::optional<tokenizer::IncrementalDecoder> decoder;
    if (tok_) decoder.emplace(*tok_, /*skip_special=*/true);
    std::vector<int32_t> ids;
    std::string text;
    nlohmann::json logprobs = nlohmann::json::array();
    auto token_str = [&](int32_t t) { return tok_ ? tok_->token_bytes(t) : std::string(); };
    const auto& stops = tok_ ? tok_->stop_ids() : std::vector<int32_t>{};
    auto on_token = [&](const engine::GeneratedToken& t) {
      ids.push_back(t.token);
      const bool stop = std::find(stops.begin(), stops.end(), t.token) != stops.end();
      std::string piece = (!decoder || (stop && !f_.gen.generate.ignore_eos)) ? "" : decoder->push(t.token);
      text += piece;
      if (f_.json) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& a : t.top)
          top.push_back({{"token_id", a.token}, {"token", token_str(a.token)}, {"logprob", a.logprob}});
        logprobs.push_back({{"token_id", t.token}, {"token", token_str(t.token)},
                            {"logprob", t.logprob}, {"top_logprobs", top}});
      } else if (stream_text && !piece.empty()) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    };
    engine::GenerateStats st = gen_.generate(prompt, f_.gen.generate, on_token);
    log::debug("prefill: {} prompt tokens ({} reused) in {} steps of at most {} tokens",
               st.prompt_tokens, st.cached_tokens, st.prefill_steps, f_.gen.generate.prefill_chunk);
    const std::string rest = decoder ? decoder->flush() : "";
    text += rest;
    if (stream_text && !f_.json) {
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      std::fputs("\n", stdout);
      const double prefill_tps = st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0;
      const double decode_tps =
          st.decode_seconds > 0 && st.generated > 1 ? (st.generated - 1) / st.decode_seconds : 0;
      log::info("{} prompt tokens ({:.1f} tok/s), {} generated ({:.1f} tok/s), finish: {}",
                st.prompt_tokens, prefill_tps, st.generated, decode_tps, st.finish_reason);
    }
    return {{"prompt_token_ids", prompt},
            {"token_ids", ids},
            {"text", text},
            {"logprobs", logprobs},
            {"finish_reason", st.finish_reason},
            {"seed", f_.gen.seed},
            {"usage", {{"prompt_tokens", st.prompt_tokens}, {"completion_tokens", st.generated}}},
            {"timings",
             {{"prefill_seconds", st.prefill_seconds},
              {"decode_seconds", st.decode_seconds},
              {"prefill_steps", st.prefill_steps}}}};
  }

  void reset() { gen_.reset(); }

 private:
  RunFlags& f_;
  engine::ModelBundle& b_;
  const tokenizer::Tokenizer* tok_;
  engine::Generator gen_;
};

void print_json(const nlohmann::json& j) {
  // Invalid UTF-8 in token strings is replaced rather than failing the dump.
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  std::cout.flush();
}

void run(RunFlags& f) {
  const int given = int(!f.prompt.empty()) + int(!f.prompt_ids.empty()) + int(!f.batch_file.empty());
  RIDGE_CHECK(given == 1, "give exactly one of --prompt, --prompt-ids or --batch-file{}",
              given == 0 && f.prompt_given
                  ? " (the prompt given is empty: there is nothing to continue)"
                  : "");
  app::resolve_model(f.model);
  app::resolve_seed(f.gen);
  f.gen.generate.sampling.top_logprobs = f.top_logprobs;
  f.gen.generate.sampling.validate();
  app::use_prefill_chunk(f.model, f.gen);
  if (!f.batch_file.empty()) {
    // Before the model loads: a folder or a socket is not a list of prompts. (A pipe is: e.g.
    // /dev/stdin or a shell's <(...).)
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status s = fs::status(f.batch_file, ec);
    if (!fs::exists(s)) fail("--batch-file '{}' not found", f.batch_file);
    if (fs::is_directory(s))
      fail("--batch-file '{}' is a directory: give a file of JSON lines", f.batch_file);
    if (!fs::is_regular_file(s) && !fs::is_fifo(s) && !fs::is_character_file(s))
      fail("--batch-file '{}' is not a regular file: give a file of JSON lines", f.batch_file);
  }
  auto bundle = engine::ModelBundle::load(f.model);
  Runner runner(f, *bundle);
  if (f.batch_file.empty()) {
    std::vector<int32_t> prompt = f.prompt_ids.empty() ? runner.encode(f.prompt) : f.prompt_ids;
    nlohmann::json out = runner.generate(prompt, /*stream_text=*/true);
    if (f.json) print_json(out);
    return;
  }
  f.json = true;
  std::ifstream in(f.batch_file);
  RIDGE_CHECK(in, "cannot open --batch-file '{}'", f.batch_file);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json req = nlohmann::json::parse(line, nullptr, false);
    RIDGE_CHECK(req.is_object(), "{}:{}: not a JSON object", f.batch_file, n);
    std::vector<int32_t> prompt;
    if (req.contains("prompt_ids")) {
      const nlohmann::json& ids = req["prompt_ids"];
      RIDGE_CHECK(ids.is_array() && !ids.empty(),
                  "{}:{}: prompt_ids must be a non-empty array of token ids", f.batch_file, n);
      for (size_t i = 0; i < ids.size(); ++i) {
        const nlohmann::json& id = ids[i];
        // Integers only (1.9 is no token id), and int32s: no wrapping of 4294967297 to 1. (The
        // generator checks them against the vocabulary.)
        constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();
        RIDGE_CHECK(id.is_number_integer() &&
                        (id.is_number_unsigned() ? id.get<uint64_t>() <= uint64_t(kMaxId)
                                                 : id.get<int64_t>() >= 0),
                    "{}:{}: prompt_ids[{}] is {}: token ids are integers from 0 to {}",
                    f.batch_file, n, i, id.dump(), kMaxId);
        prompt.push_back(int32_t(id.get<int64_t>()));
      }
    } else {
      RIDGE_CHECK(req.contains("prompt") && req["prompt"].is_string(),
                  "{}:{}: needs \"prompt\" (string) or \"prompt_ids\"", f.batch_file, n);
      try {
        prompt = runner.encode(req["prompt"].get<std::string>());
      } catch (const Error& e) {
        fail("{}:{}: {}", f.batch_file, n, e.what());
      }
    }
    runner.reset();  // each prompt on its own, as a separate run would
    nlohmann::json out;
    try {
      out = runner.generate(prompt, false);
    } catch (const Error& e) {
      fail("{}:{}: {}", f.batch_file, n, e.what());
    }
    print_json(out);
  }
  RIDGE_CHECK(!in.bad(), "cannot read --batch-file '{}'", f.batch_file);
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<RunFlags>();
  app::add_model_options(sub, f->model);
  app::add_generation_options(sub, f->gen);
  sub.add_option("-p,--prompt", f->prompt, "the prompt")->each([f](const std::string&) {
    f->prompt_given = true;
  });
  sub.add_option("--prompt-ids", f->prompt_ids, "the prompt as token ids (comma or space separated)")
      ->delimiter(',');
  sub.add_option("--batch-file", f->batch_file,
                 "JSON lines of {\"prompt\": ...} or {\"prompt_ids\": [...]}; one JSON line out each");
  sub.add_flag("--chat", f->chat, "wrap the prompt as a user message in the model's chat template");
  sub.add_option("--system", f->system, "system message (with --chat)");
  sub.add_option("--top-logprobs", f->top_logprobs, "alternatives to report per token (--json)")
      ->check(CLI::Range(0, 20));
  sub.add_flag("--json", f->json,
               "print one JSON object: prompt_token_ids, token_ids, text, per-token logprobs");
  sub.callback([f] { run(*f); });
}

const app::Registrar reg("run", "Generate one completion for a prompt", &setup);

}  // namespace
