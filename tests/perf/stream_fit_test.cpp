// perf::fit_stream against the line it was drawn from, and against an independent solution of the
// normal equations in long double where noise is added.
#include "ridge/perf/stream_fit.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

using Points = std::vector<std::pair<double, double>>;

// Decode-GEMV-like points: 4-12 shapes of 10-300 MB at a random fixed cost and rate.
struct Drawn {
  Points points;
  double fixed_s, bytes_per_s;
};
Drawn draw(std::mt19937& rng, double noise) {
  std::uniform_real_distribution<double> fixed(1e-6, 8e-6), rate(1e12, 5e12), bytes(1e7, 3e8),
      rel(-noise, noise);
  std::uniform_int_distribution<int> count(4, 12);
  Drawn d{{}, fixed(rng), rate(rng)};
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    const double b = bytes(rng);
    d.points.emplace_back(b, (d.fixed_s + b / d.bytes_per_s) * (1.0 + rel(rng)));
  }
  return d;
}

TEST(StreamFit, RecoversTheLineItWasDrawnFrom) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const Drawn d = draw(rng, 0.0);
    const StreamFit f = fit_stream(d.points);
    EXPECT_NEAR(f.fixed_s, d.fixed_s, 1e-6 * d.fixed_s);
    EXPECT_NEAR(f.bytes_per_s, d.bytes_per_s, 1e-9 * d.bytes_per_s);
    EXPECT_NEAR(f.r2, 1.0, 1e-12);
    EXPECT_EQ(f.points, int(d.points.size()));
  }
}

TEST(StreamFit, NoisyTimesMatchTheNormalEquations) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const Drawn d = draw(rng, 0.01);  // ±1 % on every time
    const StreamFit f = fit_stream(d.points);
    // The normal equations [n Σx; Σx Σx²] [a; b] = [Σy; Σxy], solved in long double.
    long double n = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
    for (const auto& [x, y] : d.points) {
      n += 1, sx += x, sxx += (long double)x * x, sy += y, sxy += (long double)x * y;
    }
    const long double det = n * sxx - sx * sx;
    const long double b = (n * sxy - sx * sy) / det, a = (sy - b * sx) / n;
    EXPECT_NEAR(f.fixed_s, double(a), 1e-9 * d.fixed_s + 1e-6 * std::abs(double(a)));
    EXPECT_NEAR(1.0 / f.bytes_per_s, double(b), 1e-6 * std::abs(double(b)));
    // r² as 1 − (residual sum of squares) / (total sum of squares), from the same solution.
    long double ss_res = 0, ss_tot = 0;
    for (const auto& [x, y] : d.points) {
      const long double r = y - a - b * x, t = y - sy / n;
      ss_res += r * r, ss_tot += t * t;
    }
    EXPECT_NEAR(f.r2, double(1 - ss_res / ss_tot), 1e-9);
  }
}

TEST(StreamFit, TimesThatDoNotGrowHaveNoRate) {
  const Points flat = {{1e7, 5e-6}, {1e8, 5e-6}, {2e8, 5e-6}};
  const StreamFit f = fit_stream(flat);
  EXPECT_EQ(f.bytes_per_s, 0.0);
  EXPECT_DOUBLE_EQ(f.fixed_s, 5e-6);
  const Points falling = {{1e7, 9e-6}, {1e8, 6e-6}, {2e8, 3e-6}};
  EXPECT_EQ(fit_stream(falling).bytes_per_s, 0.0);
}

TEST(StreamFit, RefusesWhatCannotBeFitted) {
  EXPECT_THROW(fit_stream(Points{}), Error);
  EXPECT_THROW(fit_stream(Points{{1e8, 3e-5}}), Error);
  EXPECT_THROW(fit_stream(Points{{1e8, 3e-5}, {1e8, 4e-5}, {1e8, 5e-5}}), Error);  // one size
  EXPECT_THROW(fit_stream(Points{{1e8, 3e-5}, {2e8, -1.0}}), Error);
  EXPECT_THROW(fit_stream(Points{{1e8, 3e-5}, {std::nan(""), 4e-5}}), Error);
  try {
    fit_stream(Points{{1e8, 3e-5}, {1e8, 4e-5}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ridge::perf
