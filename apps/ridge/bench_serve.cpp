// ridge bench serve: a load generator for any OpenAI-compatible endpoint (ridge's own or
// another server's): fixed concurrency or Poisson arrivals, fixed/uniform/lognormal lengths,
// random or shared-prefix prompts; prints TTFT, TPOT, ITL and end-to-end percentiles,
// throughput and goodput under SLOs, as a table and (--json) JSON.
#include <cstdio>
#include <fstream>

#include "ridge/core/error.h"
#include "ridge/server/load_generator.h"
#include "subcommand.h"

namespace {

struct Flags {
  ridge::server::LoadConfig load;
  std::string json_path;
  bool fail_on_error = false;
};

void run(Flags& f) {
  auto rep = ridge::server::run_load(f.load);
  std::fputs(rep.table().c_str(), stdout);
  if (!f.json_path.empty()) {
    const std::string text = rep.to_json().dump(2);
    if (f.json_path == "-") {
      std::printf("%s\n", text.c_str());
    } else {
      std::ofstream out(f.json_path);
      if (!out) ridge::fail("cannot write {}", f.json_path);
      out << text << "\n";
    }
  }
  std::fflush(stdout);
  if (f.fail_on_error && rep.failed > 0) throw ridge::app::Exit{3};
}

void setup(CLI::App& sub) {
  auto f = std::make_shared<Flags>();
  auto& c = f->load;
  sub.add_option("--host", c.host, "server address")->capture_default_str();
  sub.add_option("--port", c.port, "server port")->capture_default_str();
  sub.add_option("--api-key", c.api_key, "bearer token")->envname("RIDGE_API_KEY");
  sub.add_option("--model", c.model, "model name (default: the first of /v1/models)");
  sub.add_option("--endpoint", c.endpoint, "completions | chat")
      ->capture_default_str()->check(CLI::IsMember({"completions", "chat"}));
  sub.add_option("-n,--num-requests", c.num_requests, "requests to send")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("-c,--concurrency", c.concurrency,
                 "clients at once (closed loop); with --request-rate: a cap (0: none)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("-r,--request-rate", c.request_rate, "Poisson arrivals per second (0: closed loop)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("--input-len", c.input_len, "prompt tokens (mean)")->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("--output-len", c.output_len, "output tokens (mean)")->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("--length-dist", c.length_dist, "fixed | uniform | lognormal (ShareGPT-like)")
      ->capture_default_str()->check(CLI::IsMember({"fixed", "uniform", "lognormal"}));
  sub.add_option("--range-ratio", c.range_ratio, "uniform: lengths in [len(1-r), len(1+r)]")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub.add_option("--lognormal-sigma", c.lognormal_sigma, "lognormal: sigma of log length")->capture_default_str();
  sub.add_option("--prompts", c.prompt_kind, "random | shared-prefix")
      ->capture_default_str()->check(CLI::IsMember({"random", "shared-prefix"}));
  sub.add_option("--prefix-len", c.prefix_len, "shared-prefix: shared tokens")->capture_default_str();
  sub.add_option("--num-prefixes", c.num_prefixes, "shared-prefix: distinct prefixes")->capture_default_str();
  sub.add_option("--token-range", c.token_low, "random prompt token ids start here")->capture_default_str();
  sub.add_option("--token-high", c.token_high, "random prompt token ids end below this")->capture_default_str();
  sub.add_option("--temperature", c.temperature, "sampling temperature")->capture_default_str();
  sub.add_option("--seed", c.seed, "workload seed")->capture_default_str();
  sub.add_option("--slo-ttft-ms", c.slo_ttft_ms, "goodput: TTFT bound (0: none)")->capture_default_str();
  sub.add_option("--slo-tpot-ms", c.slo_tpot_ms, "goodput: TPOT bound (0: none)")->capture_default_str();
  sub.add_option("--slo-e2e-ms", c.slo_e2e_ms, "goodput: end-to-end bound (0: none)")->capture_default_str();
  sub.add_option("--timeout", c.timeout_s, "per-request timeout, seconds")->capture_default_str();
  sub.add_option("--json", f->json_path, "also write the report as JSON to this file ('-': stdout)");
  sub.add_flag("--fail-on-error", f->fail_on_error, "exit 3 when any request failed");
  sub.callback([f] { run(*f); });
}

const ridge::app::BenchRegistrar reg("serve", "Load-test an OpenAI-compatible server (TTFT/TPOT/ITL, goodput)", &setup);

}  // namespace
