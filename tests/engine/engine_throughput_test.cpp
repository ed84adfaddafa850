// Not a test: a measurement, disabled by default (performance is never a timed test). Prints the
// aggregate decode throughput of N concurrent greedy streams on the default model (CPU):
//   test_engine --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'
#include <chrono>
#include <cstdio>

#include "engine_test_util.h"

namespace ridge::engine {
namespace {

TEST(EngineThroughput, DISABLED_ConcurrentStreams) {
  ModelBundle* b = testing::cpu_bundle(4096);
  if (!b) GTEST_SKIP() << "no model";
  std::mt19937 rng(1);
  const int32_t prompt_len = 32, gen = 48;
  for (int streams : {1, 2, 4, 8, 16}) {
    EngineConfig c;
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 512;
    c.enable_prefix_caching = false;
    Engine e(*b, c);
    testing::Collector col;
    std::vector<std::string> ids;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < streams; ++i) {
      ids.push_back("s" + std::to_string(i));
      e.submit(testing::greedy_request(
                   ids.back(), testing::random_prompt(rng, b->config().vocab, prompt_len), gen),
               col.callback());
    }
    ASSERT_TRUE(col.wait_finished(ids, 600));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const EngineMetrics m = e.metrics();
    std::printf(
        "%2d streams: %4d prompt + %4d generated tokens in %6.2f s = %6.1f generated tok/s "
        "(%lld steps, mean TPOT %.1f ms)\n",
        streams, streams * prompt_len, streams * gen, s, streams * gen / s, (long long)m.steps,
        m.tpot.count ? 1e3 * m.tpot.sum / double(m.tpot.count) : 0.0);
  }
}

}  // namespace
}  // namespace ridge::engine
