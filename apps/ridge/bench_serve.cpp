// ridge bench serve: a load generator for any OpenAI-compatible endpoint (ridge's own or
// another server's): fixed concurrency, all requests at once (--offline) or Poisson arrivals,
// fixed/uniform/lognormal lengths, random or shared-prefix prompts; prints TTFT, TPOT, ITL and
// end-to-end percentiles, throughput and goodput under SLOs, as a table and (--json) JSON.
// --rates runs one Poisson phase per rate (a sweep: goodput against rate, the highest rate whose
// p99s meet the SLOs, --plot draws it through gnuplot).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/perf/plot.h"
#include "ridge/server/load_generator.h"
#include "ridge/server/load_sweep.h"
#include "subcommand.h"

namespace {

using ridge::server::LoadConfig;

struct Flags {
  ridge::server::LoadConfig load;
  std::string json_path;
  bool fail_on_error = false;
  bool offline = false;
  bool concurrency_given = false;
  int64_t warmup = 0;
  std::vector<double> rates;
  double duration_s = 0;
  int64_t max_misses = 0;
  std::string plot;
};

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  if (path.empty()) return;
  const std::string text = j.dump(2);
  if (path == "-") {
    std::printf("%s\n", text.c_str());
  } else {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    std::ofstream out(path);
    if (!out) ridge::fail("cannot write {}", path);
    out << text << "\n";
  }
}

// Requests outside the measurement: first-use costs (allocations, kernel choice, graph capture)
// stay out of the first phase's latencies.
void warm_up(const Flags& f) {
  if (f.warmup <= 0) return;
  LoadConfig c = f.load;
  c.request_rate = 0;
  c.num_requests = f.warmup;
  c.concurrency = std::min<int64_t>(f.warmup, f.load.concurrency > 0 ? f.load.concurrency : f.warmup);
  c.seed = f.load.seed ^ 0x77a4ull;
  const auto rep = ridge::server::run_load(c);
  std::printf("warm-up       %lld requests (concurrency %lld) in %.2f s, %lld failed\n",
              (long long)c.num_requests, (long long)c.concurrency, rep.duration_s, (long long)rep.failed);
  std::fflush(stdout);
}

// The sweep chart: goodput and achieved rate against offered rate (top), p99 TTFT and TPOT with
// their SLOs (bottom). The data (.dat) and script (.gp) are written beside the PNG.
std::string plot_sweep(const ridge::server::SweepReport& rep, const std::string& png) {
  namespace fs = std::filesystem;
  using ridge::perf::gnuplot_string;
  const fs::path out(png);
  const std::string stem = out.stem().string();
  const std::string dat_name = stem + ".dat", gp_name = stem + ".gp";
  std::string dat =
      "# rate goodput completed_per_wall_s ttft_p99_ms tpot_p99_ms ttft_p50_ms tpot_p50_ms "
      "meets_slo output_tok_s attainment\n";
  for (const auto& p : rep.points) {
    const auto& r = p.report;
    dat += fmt::format("{:.6g} {:.6g} {:.6g} {:.6g} {:.6g} {:.6g} {:.6g} {} {:.6g} {:.6g}\n", p.rate,
                       p.goodput(), r.request_throughput, r.ttft_ms.p99, r.tpot_ms.p99,
                       r.ttft_ms.p50, r.tpot_ms.p50, p.meets_slo() ? 1 : 0, r.output_throughput,
                       p.attainment());
  }
  const LoadConfig& c = rep.config.load;
  const double top = rep.points.empty() ? 1.0 : rep.points.back().rate * 1.05;
  std::string gp = fmt::format(
      "# ridge bench serve --plot: goodput vs request rate. Re-render: gnuplot {}\n"
      "reset\n"
      "set terminal pngcairo size 1100,1000 noenhanced font 'sans,11'\n"
      "set output {}\n"
      "set multiplot layout 2,1 title {}\n"
      "set grid\n"
      "set key left top\n"
      "set xrange [0:{:.6g}]\n"
      "set yrange [0:*]\n"
      "set xlabel 'offered request rate (requests/s, Poisson)'\n"
      "set ylabel 'requests/s'\n",
      gp_name, gnuplot_string(out.filename().string()),
      gnuplot_string(fmt::format("{}: input {} / output {} tokens ({}), {}", c.endpoint, c.input_len,
                                 c.output_len, c.length_dist,
                                 rep.best_rate > 0 ? fmt::format("highest rate meeting the SLOs {:g} req/s", rep.best_rate)
                                                   : std::string("no rate met the SLOs"))),
      top);
  if (rep.best_rate > 0)
    gp += fmt::format("set arrow from {0:.6g}, graph 0 to {0:.6g}, graph 1 nohead dt 2 lc rgb 'gray40'\n",
                      rep.best_rate);
  gp += fmt::format(
      "plot x title 'offered' dt 3 lc rgb 'gray50', \\\n"
      "  {} using 1:2 with linespoints pt 7 ps 1.4 lw 2 lc rgb '#2ca02c' title {}\n"
      "unset arrow\n"
      "set logscale y\n"
      "set yrange [*:*]\n"
      "set ylabel 'p99 latency (ms)'\n"
      "set key left top\n",
      gnuplot_string(dat_name),
      gnuplot_string(c.slo_ttft_ms > 0 || c.slo_tpot_ms > 0 || c.slo_e2e_ms > 0
                         ? "goodput: rate x share of requests meeting every SLO"
                         : "goodput (no SLO given: every completed request)"));
  std::string plots = fmt::format(
      "plot {0} using 1:4 with linespoints pt 7 ps 1.2 lw 2 lc rgb '#d62728' title 'p99 TTFT', \\\n"
      "  '' using 1:5 with linespoints pt 5 ps 1.2 lw 2 lc rgb '#9467bd' title 'p99 TPOT'",
      gnuplot_string(dat_name));
  if (c.slo_ttft_ms > 0)
    plots += fmt::format(", \\\n  {:.6g} title 'TTFT SLO' dt 2 lw 1.5 lc rgb '#d62728'", c.slo_ttft_ms);
  if (c.slo_tpot_ms > 0)
    plots += fmt::format(", \\\n  {:.6g} title 'TPOT SLO' dt 2 lw 1.5 lc rgb '#9467bd'", c.slo_tpot_ms);
  gp += plots + "\nunset multiplot\n";
  const std::string dir = out.has_parent_path() ? out.parent_path().string() : ".";
  if (ridge::perf::find_gnuplot().empty()) {
    // The measurement is the costly part: without gnuplot here, leave the chart to be rendered
    // elsewhere from the data and script.
    ridge::perf::render_gnuplot(dir, {{dat_name, dat}, {gp_name, gp}}, {});
    std::fprintf(stderr,
                 "ridge bench serve: warning: no gnuplot here (Debian: gnuplot-nox): wrote %s and %s; "
                 "render with 'gnuplot %s' in %s\n",
                 dat_name.c_str(), gp_name.c_str(), gp_name.c_str(), dir.c_str());
    return {};
  }
  ridge::perf::render_gnuplot(dir, {{dat_name, dat}, {gp_name, gp}}, {gp_name});
  return (fs::path(dir) / out.filename()).string();
}

void run(Flags& f) {
  if (f.offline) {
    if (f.load.request_rate > 0 || !f.rates.empty()) ridge::fail("--offline takes no request rate");
    f.load.concurrency = f.load.num_requests;
  }
  if ((f.load.request_rate > 0 || !f.rates.empty()) && !f.concurrency_given)
    f.load.concurrency = 0;  // with arrivals at a rate, -c is only a cap when given
  if (!f.rates.empty() && f.load.request_rate > 0) ridge::fail("give --request-rate or --rates, not both");
  if (!f.plot.empty() && f.rates.empty()) ridge::fail("--plot draws a sweep: give --rates");
  warm_up(f);
  if (!f.rates.empty()) {
    ridge::server::SweepConfig sc;
    sc.load = f.load;
    sc.rates = f.rates;
    sc.duration_s = f.duration_s;
    sc.max_misses = f.max_misses;
    // The JSON file is rewritten after every point ("complete": false until the end): a sweep
    // stopped early (a time limit) keeps what it measured.
    ridge::server::SweepReport partial;
    partial.config = sc;
    auto& pr = partial.config.rates;
    std::sort(pr.begin(), pr.end());
    pr.erase(std::unique(pr.begin(), pr.end()), pr.end());
    auto rep = ridge::server::run_sweep(sc, [&](const ridge::server::SweepPoint& p) {
      if (!f.json_path.empty() && f.json_path != "-") {
        partial.points.push_back(p);
        ridge::server::summarize(partial);
        auto j = partial.to_json();
        j["complete"] = false;
        write_json(f.json_path, j);
      }
      const auto& r = p.report;
      std::printf("rate %8.2f   %lld requests in %.1f s: goodput %.2f req/s, p99 TTFT %.1f ms, p99 TPOT %.2f ms: %s\n",
                  p.rate, (long long)r.config.num_requests, r.duration_s, p.goodput(), r.ttft_ms.p99,
                  r.tpot_ms.p99, p.meets_slo() ? "met" : ("missed (" + p.slo_miss + ")").c_str());
      std::fflush(stdout);
    });
    std::fputs(rep.table().c_str(), stdout);
    auto j = rep.to_json();
    j["complete"] = true;
    write_json(f.json_path, j);  // first: a failing plot keeps the measurement
    std::fflush(stdout);
    if (!f.plot.empty()) {
      const std::string png = plot_sweep(rep, f.plot);
      if (!png.empty()) std::fprintf(stderr, "wrote %s\n", png.c_str());
    }
    int64_t failed = 0;
    for (const auto& p : rep.points) failed += p.report.failed;
    if (f.fail_on_error && failed > 0) throw ridge::app::Exit{3};
    return;
  }
  auto rep = ridge::server::run_load(f.load);
  std::fputs(rep.table().c_str(), stdout);
  write_json(f.json_path, rep.to_json());
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
  auto* conc = sub.add_option("-c,--concurrency", c.concurrency,
                              "clients at once (closed loop); with a rate: a cap on requests in "
                              "flight (default then: none)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("-r,--request-rate", c.request_rate, "Poisson arrivals per second (0: closed loop)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_flag("--offline", f->offline,
               "submit all requests at once (concurrency = --num-requests): maximum-load throughput");
  sub.add_option("--rates", f->rates,
                 "sweep: one Poisson phase per rate (comma-separated requests/s), ascending")
      ->delimiter(',')->check(CLI::PositiveNumber);
  sub.add_option("--duration", f->duration_s,
                 "sweep: seconds of arrivals per rate (ceil(rate x S) requests; 0: -n each)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("--max-misses", f->max_misses,
                 "sweep: stop after this many rates missed the SLOs (0: run every rate)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("--plot", f->plot, "sweep: draw goodput and p99s vs rate into this PNG (gnuplot)");
  sub.add_option("--warmup", f->warmup, "requests sent (closed loop) before measuring, not reported")
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
  sub.add_option("--slo-ttft-ms", c.slo_ttft_ms, "goodput (per request) and sweep (p99): TTFT bound (0: none)")->capture_default_str();
  sub.add_option("--slo-tpot-ms", c.slo_tpot_ms, "goodput (per request) and sweep (p99): TPOT bound (0: none)")->capture_default_str();
  sub.add_option("--slo-e2e-ms", c.slo_e2e_ms, "goodput (per request) and sweep (p99): end-to-end bound (0: none)")->capture_default_str();
  sub.add_option("--timeout", c.timeout_s, "per-request timeout, seconds")->capture_default_str();
  sub.add_option("--json", f->json_path, "also write the report as JSON to this file ('-': stdout)");
  sub.add_flag("--fail-on-error", f->fail_on_error, "exit 3 when any request failed");
  sub.callback([f, conc] {
    f->concurrency_given = conc->count() > 0;
    run(*f);
  });
}

const ridge::app::BenchRegistrar reg("serve", "Load-test an OpenAI-compatible server (TTFT/TPOT/ITL, goodput)", &setup);

}  // namespace
