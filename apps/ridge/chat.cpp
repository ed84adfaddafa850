// ridge chat: an interactive chat in the terminal using the model's own chat template. History
// is kept (and its KV reused); Ctrl-D ends; /reset clears the history.
#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "common.h"
#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/tokenizer/chat_template.h"
#include "subcommand.h"

namespace {

struct ChatFlags {
  ridge::engine::BundleOptions model;
  ridge::app::GenerationFlags gen;
  std::string system;
};

void chat(ChatFlags& f) {
  using namespace ridge;
  // Each turn generates a reply: with none allowed, every turn would be refused.
  if (f.gen.generate.max_tokens <= 0)
    fail("--max-tokens {}: ridge chat generates a reply each turn, so it needs at least 1",
         f.gen.generate.max_tokens);
  app::resolve_model(f.model);
  app::resolve_seed(f.gen);
  app::use_prefill_chunk(f.model, f.gen);
  auto bundle = engine::ModelBundle::load(f.model);
  if (!bundle->tokenizer)
    fail(
        "{} has no tokenizer: ridge chat needs one (tokenizer.json, or a GGUF with its "
        "vocabulary)",
        f.model.model_path);
  const tokenizer::Tokenizer& tok = *bundle->tokenizer;
  const std::string& src =
      tok.chat_template().empty() ? tokenizer::default_chat_template() : tok.chat_template();
  tokenizer::ChatTemplate tmpl(src);
  const std::string bos = tok.bos_id() ? tok.token_text(*tok.bos_id()) : "";
  const std::string eos = tok.eos_id() ? tok.token_text(*tok.eos_id()) : "";
  engine::Generator gen(*bundle->model, *bundle->kv_pool, tok.stop_ids());

  std::vector<tokenizer::ChatMessage> history;
  if (!f.system.empty()) history.push_back({"system", f.system});
  const bool tty = isatty(STDIN_FILENO);
  if (tty) fmt::print(stderr, "chat with {} — Ctrl-D ends, /reset clears the history\n",
                      bundle->weights->path());
  std::string line;
  for (;;) {
    if (tty) {
      fmt::print(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/reset") {
      history.resize(f.system.empty() ? 0 : 1);
      gen.reset();
      continue;
    }
    history.push_back({"user", line});
    std::vector<int32_t> prompt;
    try {
      prompt = tok.encode(tmpl.render(history, true, bos, eos), false, true);
    } catch (const Error& e) {
      history.pop_back();
      log::error("{}", e.what());
      continue;
    }
    tokenizer::IncrementalDecoder decoder(tok, true);
    std::string reply;
    engine::GenerateOptions opt = f.gen.generate;
    opt.max_tokens = std::min<int32_t>(opt.max_tokens, gen.context_limit() - int32_t(prompt.size()));
    if (opt.max_tokens <= 0) {
      log::error("the conversation ({} tokens) fills the context of {}; /reset to start over",
                 prompt.size(), gen.context_limit());
      history.pop_back();
      continue;
    }
    auto st = gen.generate(prompt, opt, [&](const engine::GeneratedToken& t) {
      const auto& stops = tok.stop_ids();
      if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) return true;
      std::string piece = decoder.push(t.token);
      reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    const std::string rest = decoder.flush();
    reply += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    history.push_back({"assistant", reply});
    log::debug("turn: {} prompt tokens ({} reused), {} generated, {}; {} prefill steps",
               st.prompt_tokens, st.cached_tokens, st.generated, st.finish_reason,
               st.prefill_steps);
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<ChatFlags>();
  ridge::app::add_model_options(sub, f->model);
  ridge::app::add_generation_options(sub, f->gen);
  f->gen.generate.max_tokens = 1024;
  sub.add_option("--system", f->system, "system message");
  sub.callback([f] { chat(*f); });
}

const ridge::app::Registrar reg("chat", "Interactive chat using the model's chat template", &setup);

}  // namespace
