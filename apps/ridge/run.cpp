// ridge run: one completion in the terminal, streamed; --json prints one JSON object instead.
#include <cstdio>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common.h"
#include "ridge/core/log.h"
#include "ridge/tokenizer/chat_template.h"
#include "subcommand.h"

namespace {

struct RunFlags {
  ridge::engine::BundleOptions model;
  ridge::app::GenerationFlags gen;
  std::string prompt;
  std::string system;
  bool chat = false;
  bool json = false;
  int top_logprobs = 0;
};

void run(RunFlags& f) {
  using namespace ridge;
  app::resolve_model(f.model);
  const uint64_t seed = app::resolve_seed(f.gen);
  f.gen.generate.sampling.top_logprobs = f.top_logprobs;
  f.gen.generate.sampling.validate();
  auto bundle = engine::ModelBundle::load(f.model);
  const tokenizer::Tokenizer& tok = *bundle->tokenizer;

  std::vector<int32_t> prompt;
  if (f.chat) {
    std::vector<tokenizer::ChatMessage> messages;
    if (!f.system.empty()) messages.push_back({"system", f.system});
    messages.push_back({"user", f.prompt});
    const std::string& src =
        tok.chat_template().empty() ? tokenizer::default_chat_template() : tok.chat_template();
    tokenizer::ChatTemplate tmpl(src);
    const std::string bos = tok.bos_id() ? tok.token_text(*tok.bos_id()) : "";
    const std::string eos = tok.eos_id() ? tok.token_text(*tok.eos_id()) : "";
    const std::string text = tmpl.render(messages, true, bos, eos);
    prompt = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  } else {
    prompt = tok.encode(f.prompt, /*add_special=*/true, /*parse_special=*/true);
  }

  engine::Generator gen(*bundle->model, *bundle->kv_pool, tok.stop_ids());
  tokenizer::IncrementalDecoder decoder(tok, /*skip_special=*/true);
  std::vector<int32_t> ids;
  std::string text;
  nlohmann::json logprobs = nlohmann::json::array();
  auto on_token = [&](const engine::GeneratedToken& t) {
    ids.push_back(t.token);
    const bool stop = std::find(tok.stop_ids().begin(), tok.stop_ids().end(), t.token) !=
                      tok.stop_ids().end();
    std::string piece = (stop && !f.gen.generate.ignore_eos) ? "" : decoder.push(t.token);
    text += piece;
    if (f.json) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& a : t.top)
        top.push_back({{"token_id", a.token}, {"token", tok.token_bytes(a.token)},
                       {"logprob", a.logprob}});
      logprobs.push_back({{"token_id", t.token}, {"token", tok.token_bytes(t.token)},
                          {"logprob", t.logprob}, {"top_logprobs", top}});
    } else if (!piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  engine::GenerateStats st = gen.generate(prompt, f.gen.generate, on_token);
  const std::string rest = decoder.flush();
  text += rest;
  if (f.json) {
    nlohmann::json out = {
        {"prompt_token_ids", prompt},
        {"token_ids", ids},
        {"text", text},
        {"logprobs", logprobs},
        {"finish_reason", st.finish_reason},
        {"seed", seed},
        {"usage", {{"prompt_tokens", st.prompt_tokens}, {"completion_tokens", st.generated}}},
        {"timings",
         {{"prefill_seconds", st.prefill_seconds}, {"decode_seconds", st.decode_seconds}}}};
    // Invalid UTF-8 in token strings is replaced rather than failing the dump.
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputs("\n", stdout);
    const double prefill_tps = st.prefill_seconds > 0 ? st.prompt_tokens / st.prefill_seconds : 0;
    const double decode_tps =
        st.decode_seconds > 0 && st.generated > 1 ? (st.generated - 1) / st.decode_seconds : 0;
    log::info("{} prompt tokens ({:.1f} tok/s), {} generated ({:.1f} tok/s), finish: {}",
              st.prompt_tokens, prefill_tps, st.generated, decode_tps, st.finish_reason);
  }
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<RunFlags>();
  ridge::app::add_model_options(sub, f->model);
  ridge::app::add_generation_options(sub, f->gen);
  sub.add_option("-p,--prompt", f->prompt, "the prompt")->required();
  sub.add_flag("--chat", f->chat, "wrap the prompt as a user message in the model's chat template");
  sub.add_option("--system", f->system, "system message (with --chat)");
  sub.add_option("--top-logprobs", f->top_logprobs, "alternatives to report per token (--json)")
      ->check(CLI::Range(0, 20));
  sub.add_flag("--json", f->json,
               "print one JSON object: prompt_token_ids, token_ids, text, per-token logprobs");
  sub.callback([f] { run(*f); });
}

const ridge::app::Registrar reg("run", "Generate one completion for a prompt", &setup);

}  // namespace
