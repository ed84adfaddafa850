#include "ridge/perf/simulator.h"

#include <cstdint>
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>

#include <fmt/format.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Uniform in [0, 1) from 53 random bits: the same on every platform.
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }
double exponential(std::mt19937_64& rng, double mean) { return -mean * std::log(1.0 - uniform01(rng)); }
double normal(std::mt19937_64& rng, double mean, double sd) {
  const double u1 = 1.0 - uniform01(rng), u2 = uniform01(rng);
  return mean + sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

}  // namespace

LengthDist LengthDist::parse(std::string_view text) {
  auto num = [&](std::string_view s) {
    double v = 0;
    try {
      size_t pos = 0;
      v = std::stod(std::string(s), &pos);
      if (pos != s.size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
      fail(
          "length distribution '{}': '{}' is not a number (forms: N, uniform:LO:HI, "
          "normal:MEAN:SD, exp:MEAN, lognormal:MEAN:SIGMA)",
          text, s);
    }
    // stod accepts "inf", "nan" and 1e30: a length must be a finite count of tokens.
    if (!std::isfinite(v) || !(v > 0) || v > kMaxTokens)
      fail(
          "length distribution '{}': '{}' is not a finite positive number of at most {:.0f} "
          "tokens (forms: N, uniform:LO:HI, normal:MEAN:SD, exp:MEAN, lognormal:MEAN:SIGMA)",
          text, s, kMaxTokens);
    return v;
  };
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t c = text.find(':', start);
    parts.push_back(text.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start));
    if (c == std::string_view::npos) break;
    start = c + 1;
  }
  LengthDist d;
  if (parts.size() == 1) {
    d = {Kind::fixed, std::round(num(parts[0])), 0};
    if (d.a < 1) fail("length distribution '{}': a fixed length must be at least 1 token", text);
  } else if (parts[0] == "uniform" && parts.size() == 3) {
    d = {Kind::uniform, num(parts[1]), num(parts[2])};
    if (d.b < d.a) fail("length distribution '{}': high end below low end", text);
  } else if (parts[0] == "normal" && parts.size() == 3) {
    d = {Kind::normal, num(parts[1]), num(parts[2])};
  } else if (parts[0] == "exp" && parts.size() == 2) {
    d = {Kind::exponential, num(parts[1]), 0};
  } else if (parts[0] == "lognormal" && parts.size() == 3) {
    d = {Kind::lognormal, num(parts[1]), num(parts[2])};
  } else {
    fail("length distribution '{}' not understood (forms: N, uniform:LO:HI, normal:MEAN:SD, "
         "exp:MEAN, lognormal:MEAN:SIGMA)",
         text);
  }
  return d;
}

void LengthDist::validate(std::string_view what) const {
  if (!std::isfinite(a) || !(a > 0) || a > kMaxTokens)
    fail("workload: {} length {} ({}) is not a finite positive number of at most {:.0f} tokens",
         what, a, describe(), kMaxTokens);
  if (!std::isfinite(b) || b < 0 || b > kMaxTokens)
    fail("workload: {} length spread {} ({}) is not a finite number in [0, {:.0f}]", what, b,
         describe(), kMaxTokens);
  if (kind == Kind::uniform && b < a)
    fail("workload: {} length {}: high end below low end", what, describe());
}

int64_t LengthDist::sample(std::mt19937_64& rng) const {
  double v = a;
  switch (kind) {
    case Kind::fixed: break;
    case Kind::uniform: v = a + (b - a) * uniform01(rng); break;
    case Kind::normal: v = normal(rng, a, b); break;
    case Kind::exponential: v = exponential(rng, a); break;
    case Kind::lognormal:  // as ridge bench serve draws them: mean a, sigma b, at most 8 x a
      v = std::min(8.0 * a, std::exp(normal(rng, std::log(a) - b * b / 2, b)));
      break;
  }
  return std::max<int64_t>(1, int64_t(std::llround(v)));
}

double LengthDist::mean() const { return kind == Kind::uniform ? (a + b) / 2 : a; }

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::fixed: return fmt::format("{}", int64_t(a));
    case Kind::uniform: return fmt::format("uniform:{}:{}", a, b);
    case Kind::normal: return fmt::format("normal:{}:{}", a, b);
    case Kind::exponential: return fmt::format("exp:{}", a);
    case Kind::lognormal: return fmt::format("lognormal:{}:{}", a, b);
  }
  return "?";
}

int64_t Workload::count() const {
  if (requests > 0) {
    RIDGE_CHECK(requests <= kMaxRequests,
                "workload: requests {} is more than the {} one simulation holds", requests,
                kMaxRequests);
    return requests;
  }
  RIDGE_CHECK(requests == 0, "workload: requests must be >= 0 (0: rate x duration), got {}",
              requests);
  RIDGE_CHECK(std::isfinite(duration_s) && duration_s > 0,
              "workload: give a request count or a finite duration > 0 (duration {} s)",
              duration_s);
  // (Workload::validate wants > 0 but for bursts; here only what the product below needs.)
  RIDGE_CHECK(std::isfinite(rate) && rate >= 0, "workload: rate must be finite and >= 0 (got {})",
              rate);
  const double n = std::ceil(rate * duration_s);
  RIDGE_CHECK(
      n <= double(kMaxRequests),
      "workload: rate {} x duration {} s = {:.0f} requests, more than the {} one simulation "
      "holds: lower the rate or the duration, or give a request count",
      rate, duration_s, n, kMaxRequests);
  return std::max<int64_t>(50, int64_t(n));
}

void Workload::validate() const {
  RIDGE_CHECK(std::isfinite(rate) && (rate > 0 || (arrival == Arrival::burst && rate == 0)),
              "workload: rate must be finite and > 0 requests/s (got {})", rate);
  RIDGE_CHECK(std::isfinite(duration_s) && duration_s > 0,
              "workload: duration must be finite and > 0 seconds (got {})", duration_s);
  RIDGE_CHECK(requests >= 0 && requests <= kMaxRequests,
              "workload: requests must be in [0, {}] (0: rate x duration), got {}", kMaxRequests,
              requests);
  RIDGE_CHECK(std::isfinite(prefix_share) && prefix_share >= 0 && prefix_share < 1,
              "workload: prefix share must be in [0, 1) (got {})", prefix_share);
  isl.validate("input (isl)");
  osl.validate("output (osl)");
  count();  // rate x duration within what one simulation holds
}

void Slo::validate() const {
  RIDGE_CHECK(std::isfinite(ttft_s) && ttft_s > 0,
              "SLO: TTFT must be finite and > 0 seconds (got {})", ttft_s);
  RIDGE_CHECK(std::isfinite(tpot_s) && tpot_s > 0,
              "SLO: TPOT must be finite and > 0 seconds (got {})", tpot_s);
  RIDGE_CHECK(std::isfinite(attainment) && attainment > 0 && attainment <= 1,
              "SLO: attainment must be in (0, 1] (got {})", attainment);
}

int ServingConfig::total_gpus() const {
  return mode == Mode::disagg_gpus ? prefill_gpus + decode_gpus : gpus;
}

void check_kv_cache_fits(const model::ModelConfig& cfg, const Hardware& hw, const Precision& p,
                         int64_t kv_tokens) {
  const double need = double(kv_tokens) * kv_bytes_per_token(cfg, p);
  const double free = hw.memory_bytes - weight_bytes(cfg, p);
  if (need > free)
    fail(
        "a KV cache of {} tokens ({:.1f} GB at {}) does not fit beside the weights in {}'s "
        "{:.0f} GB ({:.1f} GB left)",
        kv_tokens, need / 1e9, p.name, hw.id, hw.memory_bytes / 1e9, std::max(0.0, free / 1e9));
}

std::string ServingConfig::describe() const {
  const std::string kv = kv_tokens > 0 ? fmt::format(", KV {} tok", kv_tokens) : "";
  switch (mode) {
    case Mode::aggregated:
      return fmt::format("aggregated x{} (chunk {} tok, batch {}{})", gpus, token_budget, max_batch,
                         kv);
    case Mode::disagg_gpus:
      return fmt::format("disagg {}P:{}D GPUs{} ({} KV{})", prefill_gpus, decode_gpus,
                         prefill_hw ? fmt::format(" (prefill on {})", prefill_hw->id) : "", kv_link,
                         kv);
    case Mode::disagg_sms:
      return fmt::format("disagg by SMs x{} ({:.0f}% prefill{})", gpus, prefill_fraction * 100, kv);
  }
  return "?";
}

namespace {

enum class Role { both, prefill, decode };

struct Request {
  double arrival = 0;
  int64_t isl = 0, osl = 0;
  double first = -1, finish = -1, transfer = 0;
  double decode_start = -1;  // admitted to a decode batch (disaggregated: after the KV arrived)
};

struct Seq {
  int req;
  int64_t prefilled;  // prompt tokens in KV
  int64_t generated;  // output tokens so far
  int64_t chunk = 0;  // tokens of the prompt computed in the current step
  bool decoding = false;
};

struct Instance {
  Hardware hw;
  Role role = Role::both;
  std::vector<int> decode_targets;  // prefill role: decode instances to send KV to
  std::deque<int> waiting;
  std::vector<Seq> running;
  int64_t kv_capacity = 0, kv_used = 0, kv_peak = 0;
  bool busy = false;
  bool prefix_cached = false;
  double link_free = 0;
  // accounting
  double busy_time = 0, flops = 0, bytes = 0, energy = 0, overhead = 0;
  double prefill_time = 0, prefill_bytes = 0, link_busy = 0;
  double power_time = 0;  // time of steps the power cap set (CostOptions::power_cap)
  bool energy_known = true;
};

struct Event {
  double t;
  uint64_t seq;
  int kind;  // 0 arrival, 1 step done, 2 KV arrives at a decode instance
  int inst, req;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Sim {
 public:
  Sim(const model::ModelConfig& cfg, const Workload& w, const ServingConfig& sc, const CostOptions& opt)
      : cfg_(cfg), w_(w), sc_(sc), opt_(opt), kv_tok_(kv_bytes_per_token(cfg, opt.precision)) {}

  void add_instance(const Hardware& hw, Role role, double kv_share) {
    Instance in;
    in.hw = hw;
    in.role = role;
    const double free = hw.memory_bytes - weight_bytes(cfg_, opt_.precision);
    if (free <= 0)
      fail("the model's weights ({:.1f} GB at {}) do not fit in {}'s {:.0f} GB", weight_bytes(cfg_, opt_.precision) / 1e9,
           opt_.precision.name, hw.id, hw.memory_bytes / 1e9);
    if (sc_.kv_tokens > 0) {
      check_kv_cache_fits(cfg_, hw, opt_.precision, sc_.kv_tokens);
      in.kv_capacity = int64_t(double(sc_.kv_tokens) * kv_share);
    } else {
      in.kv_capacity = int64_t(free * sc_.kv_memory_fraction * kv_share / kv_tok_);
    }
    inst_.push_back(std::move(in));
  }

  std::vector<Instance>& instances() { return inst_; }

  void run(std::vector<Request>& reqs, double link_bw) {
    reqs_ = &reqs;
    link_bw_ = link_bw;
    for (int i = 0; i < int(reqs.size()); ++i) push(reqs[size_t(i)].arrival, 0, -1, i);
    while (!q_.empty()) {
      const Event e = q_.top();
      q_.pop();
      now_ = e.t;
      if (e.kind == 0) {
        int best = -1;
        for (int i = 0; i < int(inst_.size()); ++i) {
          if (inst_[size_t(i)].role == Role::decode) continue;
          if (best < 0 || load(i) < load(best)) best = i;
        }
        inst_[size_t(best)].waiting.push_back(e.req);
        try_start(best);
      } else if (e.kind == 1) {
        step_done(e.inst);
      } else {
        inst_[size_t(e.inst)].waiting.push_back(e.req);
        try_start(e.inst);
      }
    }
    makespan_ = now_;
  }
  double makespan() const { return makespan_; }

 private:
  const model::ModelConfig& cfg_;
  const Workload& w_;
  const ServingConfig& sc_;
  const CostOptions& opt_;
  double kv_tok_;
  std::vector<Instance> inst_;
  std::vector<Request>* reqs_ = nullptr;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  uint64_t seq_ = 0;
  double now_ = 0, makespan_ = 0, link_bw_ = 0;

  void push(double t, int kind, int inst, int req) { q_.push(Event{t, seq_++, kind, inst, req}); }
  size_t load(int i) const { return inst_[size_t(i)].waiting.size() + inst_[size_t(i)].running.size(); }
  Request& req(int r) { return (*reqs_)[size_t(r)]; }
  int64_t reserve(const Instance& in, int r) {
    const Request& q = (*reqs_)[size_t(r)];
    return in.role == Role::prefill ? q.isl : q.isl + q.osl;
  }

  void try_start(int i) {
    Instance& in = inst_[size_t(i)];
    if (in.busy) return;
    StepAggregate a;
    bool any_prefill = false;
    // 1. running decodes
    for (auto& s : in.running) {
      s.chunk = 0;
      s.decoding = s.prefilled == req(s.req).isl && s.generated < req(s.req).osl;
      if (s.decoding) {
        a.tokens += 1, a.logits_rows += 1, a.decode_seqs += 1;
        a.decode_kv_tokens += req(s.req).isl + s.generated;  // context isl+generated-1, plus this token
      }
    }
    int64_t budget = std::max<int64_t>(0, sc_.token_budget - a.tokens);
    auto add_chunk = [&](Seq& s) {
      const Request& q = req(s.req);
      s.chunk = std::min(q.isl - s.prefilled, budget);
      if (s.chunk <= 0) return;
      budget -= s.chunk;
      any_prefill = true;
      const bool last = s.prefilled + s.chunk == q.isl;
      a.tokens += s.chunk;
      a.logits_rows += last ? 1 : 0;
      a.max_new_tokens = std::max(a.max_new_tokens, s.chunk);
      if (s.chunk == 1) {
        a.decode_seqs += 1, a.decode_kv_tokens += s.prefilled + 1;
      } else {
        const double n = double(s.chunk), c = double(s.prefilled);
        a.prefill_seqs += 1, a.prefill_tokens += s.chunk;
        a.prefill_pairs += n * c + n * (n + 1) / 2;
        a.prefill_kv_tokens += s.prefilled + s.chunk;
        a.prefill_q_tiles += (s.chunk + 127) / 128;
      }
    };
    // 2. prompts already partly prefilled
    if (in.role != Role::decode)
      for (auto& s : in.running)
        if (!s.decoding && s.prefilled < req(s.req).isl && budget > 0) add_chunk(s);
    // 3. admissions
    while (!in.waiting.empty() && int64_t(in.running.size()) < sc_.max_batch) {
      const int r = in.waiting.front();
      const int64_t need = reserve(in, r);
      if (need > in.kv_capacity)
        fail("a request of {} + {} tokens needs {} KV tokens, more than {} holds ({})", req(r).isl,
             req(r).osl, need, in.hw.id, in.kv_capacity);
      if (in.kv_used + need > in.kv_capacity) break;
      if (in.role == Role::decode) {
        in.waiting.pop_front();
        in.kv_used += need;
        req(r).decode_start = now_;
        Seq s{r, req(r).isl, 1};
        s.decoding = s.generated < req(r).osl;
        if (s.decoding) {
          a.tokens += 1, a.logits_rows += 1, a.decode_seqs += 1;
          a.decode_kv_tokens += req(r).isl + 1;
        }
        in.running.push_back(s);
        continue;
      }
      if (budget <= 0) break;
      in.waiting.pop_front();
      in.kv_used += need;
      int64_t cached = 0;
      if (in.prefix_cached) cached = std::min(req(r).isl - 1, int64_t(w_.prefix_share * double(req(r).isl)));
      in.prefix_cached = w_.prefix_share > 0;
      in.running.push_back(Seq{r, cached, 0});
      add_chunk(in.running.back());
    }
    in.kv_peak = std::max(in.kv_peak, in.kv_used);
    if (a.tokens == 0) return;
    const StepCost c = predict_step(cfg_, in.hw, a, opt_);
    in.busy = true;
    in.busy_time += c.time;
    in.flops += c.flops;
    in.bytes += c.bytes;
    in.overhead += c.t_overhead;
    if (c.power_bound) in.power_time += c.time;
    if (std::isnan(c.energy_j)) in.energy_known = false; else in.energy += c.energy_j;
    if (any_prefill) in.prefill_time += c.time, in.prefill_bytes += c.bytes;
    push(now_ + c.time, 1, i, -1);
  }

  void step_done(int i) {
    Instance& in = inst_[size_t(i)];
    in.busy = false;
    std::vector<Seq> keep;
    keep.reserve(in.running.size());
    for (auto& s : in.running) {
      Request& q = req(s.req);
      bool done = false;
      if (s.decoding) {
        s.generated += 1;
        done = s.generated >= q.osl;
      } else if (s.chunk > 0) {
        s.prefilled += s.chunk;
        if (s.prefilled == q.isl) {
          q.first = now_;
          q.decode_start = now_;  // aggregated: decodes from the next step on
          s.generated = 1;
          done = q.osl <= 1;
          if (!done && in.role == Role::prefill) {
            send_kv(in, s.req);
            in.kv_used -= reserve(in, s.req);
            continue;  // leaves this instance
          }
        }
      }
      s.chunk = 0;
      s.decoding = false;
      if (done) {
        q.finish = now_;
        in.kv_used -= reserve(in, s.req);
      } else {
        keep.push_back(s);
      }
    }
    in.running.swap(keep);
    try_start(i);
  }

  void send_kv(Instance& from, int r) {
    int best = -1;
    for (int d : from.decode_targets)
      if (best < 0 || load(d) < load(best)) best = d;
    RIDGE_CHECK(best >= 0, "simulator: a prefill instance has no decode instance");
    const double dur = link_bw_ > 0 ? double(req(r).isl) * kv_tok_ / link_bw_ : 0.0;
    const double start = std::max(now_, from.link_free);
    from.link_free = start + dur;
    from.link_busy += dur;
    req(r).transfer = from.link_free - now_;
    push(from.link_free, 2, best, r);
  }
};

}  // namespace

SimResult simulate(const model::ModelConfig& cfg, const Hardware& hw, const Workload& w,
                   const ServingConfig& sc, const CostOptions& opt, const Slo& slo) {
  w.validate();
  RIDGE_CHECK(sc.token_budget >= 1 && sc.max_batch >= 1, "serving config: token budget and batch cap must be >= 1");
  // Requests: arrival times, then lengths, from one seeded generator.
  std::mt19937_64 rng(w.seed);
  const int64_t n_req = w.count();
  std::vector<Request> reqs(static_cast<size_t>(n_req));
  double t = 0;
  for (auto& r : reqs) {
    if (w.arrival == Workload::Arrival::poisson) t += exponential(rng, 1.0 / w.rate);
    else if (w.arrival == Workload::Arrival::constant) t += 1.0 / w.rate;
    r.arrival = t;
    r.isl = w.isl.sample(rng);
    r.osl = w.osl.sample(rng);
  }

  Sim sim(cfg, w, sc, opt);
  double link_bw = 0;
  int prefill_gpus = 0;
  switch (sc.mode) {
    case ServingConfig::Mode::aggregated:
      RIDGE_CHECK(sc.gpus >= 1, "serving config: gpus must be >= 1");
      for (int g = 0; g < sc.gpus; ++g) sim.add_instance(hw, Role::both, 1.0);
      break;
    case ServingConfig::Mode::disagg_gpus: {
      RIDGE_CHECK(sc.prefill_gpus >= 1 && sc.decode_gpus >= 1,
                  "serving config: disaggregation needs >= 1 prefill and >= 1 decode GPU");
      const Hardware& phw = sc.prefill_hw ? *sc.prefill_hw : hw;
      // The transfer runs at the slower end's link.
      link_bw = std::min(phw.link(sc.kv_link).bytes_per_s, hw.link(sc.kv_link).bytes_per_s);
      std::vector<int> decoders;
      for (int g = 0; g < sc.decode_gpus; ++g) {
        decoders.push_back(int(sim.instances().size()));
        sim.add_instance(hw, Role::decode, 1.0);
      }
      for (int g = 0; g < sc.prefill_gpus; ++g) {
        sim.add_instance(phw, Role::prefill, 1.0);
        sim.instances().back().decode_targets = decoders;
      }
      prefill_gpus = sc.prefill_gpus;
      break;
    }
    case ServingConfig::Mode::disagg_sms: {
      RIDGE_CHECK(sc.gpus >= 1 && sc.prefill_fraction > 0 && sc.prefill_fraction < 1,
                  "serving config: an SM split needs 0 < prefill fraction < 1 (got {})", sc.prefill_fraction);
      for (int g = 0; g < sc.gpus; ++g) {
        const int d = int(sim.instances().size());
        sim.add_instance(hw.partition(1.0 - sc.prefill_fraction), Role::decode, 0.8);
        sim.add_instance(hw.partition(sc.prefill_fraction), Role::prefill, 0.2);
        sim.instances().back().decode_targets = {d};
      }
      prefill_gpus = sc.gpus;
      break;
    }
  }
  sim.run(reqs, link_bw);

  SimResult r;
  r.config = sc.describe();
  r.requests = n_req;
  r.makespan_s = sim.makespan();
  std::vector<double> ttft, tpot, stall;
  int64_t good = 0, out_tok = 0, in_tok = 0;
  double transfer = 0;
  for (const auto& q : reqs) {
    const double a = q.first - q.arrival;
    const double b = q.osl > 1 ? (q.finish - q.first) / double(q.osl - 1) : 0.0;
    // The wait between the first token and the decode batch that continues it (KV transfer and
    // the decode side's queue): a stall the user sees like a second TTFT.
    const double st = q.osl > 1 ? std::max(0.0, q.decode_start - q.first) : 0.0;
    ttft.push_back(a);
    tpot.push_back(b);
    stall.push_back(st);
    good += (a <= slo.ttft_s && b <= slo.tpot_s && st <= slo.ttft_s) ? 1 : 0;
    out_tok += q.osl;
    in_tok += q.isl;
    transfer += q.transfer;
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / double(v.size());
  };
  r.ttft_mean = mean(ttft), r.tpot_mean = mean(tpot);
  r.ttft_p50 = percentile(ttft, 0.5), r.ttft_p90 = percentile(ttft, 0.9), r.ttft_p99 = percentile(ttft, 0.99);
  r.stall_p90 = percentile(stall, 0.9);
  r.tpot_p50 = percentile(tpot, 0.5), r.tpot_p90 = percentile(tpot, 0.9), r.tpot_p99 = percentile(tpot, 0.99);
  const double span = std::max(r.makespan_s, 1e-12);
  r.output_tok_s = double(out_tok) / span;
  r.input_tok_s = double(in_tok) / span;
  r.slo_attainment = double(good) / double(n_req);
  r.goodput_rps = double(good) / span;
  r.kv_transfer_mean_s = transfer / double(n_req);

  // Energy, cost, utilization by side.
  bool energy_known = true, price_known = true;
  double energy = 0, usd = 0, bw_time = 0, moved = 0, pre_bw_time = 0, pre_moved = 0;
  struct Side {
    double busy = 0, n = 0, flops = 0, peak_time = 0, bytes = 0, bw_time = 0, overhead = 0, power = 0;
  };
  Side pre, dec;
  double link_busy = 0, kv_fill = 0;
  for (const auto& in : sim.instances()) {
    energy_known = energy_known && in.energy_known && in.hw.tdp_w.has_value();
    // Idle time draws the measured idle power, or the TDP when none is known (an upper bound,
    // as for the busy steps): a provisioned GPU is paid for whether it works or waits.
    const double idle_w = in.hw.idle_w ? *in.hw.idle_w : in.hw.tdp_w.value_or(0.0);
    energy += in.energy + idle_w * std::max(0.0, span - in.busy_time);
    if (in.hw.price_per_hour) usd += *in.hw.price_per_hour * span / 3600.0; else price_known = false;
    bw_time += in.hw.memory_bw * span;
    moved += in.bytes;
    pre_bw_time += in.hw.memory_bw * in.prefill_time;
    pre_moved += in.prefill_bytes;
    Side& s = in.role == Role::decode ? dec : pre;
    s.busy += in.busy_time, s.n += 1, s.flops += in.flops, s.bytes += in.bytes, s.overhead += in.overhead;
    s.power += in.power_time;
    s.peak_time += in.hw.peak(opt.precision.math) * span;
    s.bw_time += in.hw.memory_bw * span;
    link_busy += in.link_busy;
    kv_fill = std::max(kv_fill, in.kv_capacity > 0 ? double(in.kv_peak) / double(in.kv_capacity) : 0.0);
  }
  r.energy_j = energy_known ? energy : kNaN;
  r.j_per_token = r.energy_j / double(out_tok + in_tok);
  r.j_per_output_token = r.energy_j / double(out_tok);
  r.gpu_hours = double(sc.total_gpus()) * span / 3600.0;
  r.usd_per_mtok = price_known ? usd / (double(out_tok) / 1e6) : kNaN;
  r.hbm_idle = 1.0 - moved / bw_time;
  r.prefill_hbm_idle = pre_bw_time > 0 ? 1.0 - pre_moved / pre_bw_time : 0.0;
  r.prefill_busy = pre.n > 0 ? pre.busy / (pre.n * span) : 0.0;
  r.decode_busy = dec.n > 0 ? dec.busy / (dec.n * span) : r.prefill_busy;

  // The binding resource: the most utilized of compute, HBM bandwidth and launch overhead of
  // each side, the KV link and the KV memory.
  std::vector<std::pair<double, std::string>> u;
  const bool agg = sc.mode == ServingConfig::Mode::aggregated;
  for (auto [side, name] : {std::pair{&pre, agg ? "" : "prefill "}, std::pair{&dec, "decode "}}) {
    if (side->n == 0) continue;
    u.push_back({side->flops / side->peak_time, fmt::format("{}compute", name)});
    u.push_back({side->bytes / side->bw_time, fmt::format("{}memory bandwidth", name)});
    u.push_back({side->overhead / (side->n * span), fmt::format("{}kernel launch overhead", name)});
    if (side->power > 0) u.push_back({side->power / (side->n * span), fmt::format("{}power cap", name)});
  }
  if (prefill_gpus > 0 && link_bw > 0) u.push_back({link_busy / (prefill_gpus * span), "KV transfer link"});
  u.push_back({kv_fill, "KV cache memory"});
  auto best = std::max_element(u.begin(), u.end());
  r.binding = fmt::format("{} ({:.0f}%)", best->second, 100 * best->first);
  return r;
}

GoodputResult max_goodput(const model::ModelConfig& cfg, const Hardware& hw, Workload w,
                          const ServingConfig& sc, const CostOptions& opt, const Slo& slo, int iterations) {
  w.arrival = w.arrival == Workload::Arrival::burst ? Workload::Arrival::poisson : w.arrival;
  // An overload shows only once the system has filled: arrivals must last a few lifetimes of a
  // request that just meets the SLOs (TTFT + OSL x TPOT), else a burst shorter than one lifetime
  // is absorbed by the KV memory and passes at any rate.
  if (w.requests == 0)
    w.duration_s = std::max({w.duration_s, 2.0 * (slo.ttft_s + w.osl.mean() * slo.tpot_s), 20.0 * slo.ttft_s});
  // (20 x TTFT: a rate x% over capacity queues x% of the window, so it must break the TTFT SLO
  // within the window for x > 5.)
  auto run = [&](double rate) {
    w.rate = rate;
    return simulate(cfg, hw, w, sc, opt, slo);
  };
  auto ok = [&](const SimResult& r) { return r.slo_attainment >= slo.attainment; };
  GoodputResult g;
  double lo = 0, hi = 0.25 * sc.total_gpus();
  SimResult at_lo;
  // Find a failing rate above a passing one by doubling / halving.
  SimResult r = run(hi);
  if (ok(r)) {
    at_lo = r;
    lo = hi;
    for (int i = 0; i < 24; ++i) {
      hi = lo * 2;
      r = run(hi);
      if (!ok(r)) break;
      lo = hi, at_lo = r;
    }
  } else {
    for (int i = 0; i < 16 && lo == 0; ++i) {
      hi /= 2;
      r = run(hi);
      if (ok(r)) lo = hi, at_lo = r, hi = hi * 2;
    }
    if (lo == 0) {  // the SLO is out of reach even when idle
      g.at = r;
      return g;
    }
  }
  for (int i = 0; i < iterations; ++i) {
    const double mid = std::sqrt(lo * hi);
    r = run(mid);
    if (ok(r)) lo = mid, at_lo = r; else hi = mid;
  }
  g.rate = lo;
  g.rate_per_gpu = lo / sc.total_gpus();
  g.at = at_lo;
  return g;
}

}  // namespace ridge::perf
