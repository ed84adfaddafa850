#include "ridge/perf/stream_fit.h"

#include <cmath>

#include "ridge/core/error.h"

namespace ridge::perf {

StreamFit fit_stream(std::span<const std::pair<double, double>> points) {
  RIDGE_CHECK(points.size() >= 2, "fit_stream: needs at least 2 points, got {}", points.size());
  double mean_x = 0, mean_y = 0;
  for (const auto& [bytes, seconds] : points) {
    RIDGE_CHECK(std::isfinite(bytes) && std::isfinite(seconds) && bytes >= 0 && seconds >= 0,
                "fit_stream: a point ({} bytes, {} s) is not finite and non-negative", bytes,
                seconds);
    mean_x += bytes;
    mean_y += seconds;
  }
  const double n = double(points.size());
  mean_x /= n;
  mean_y /= n;
  double sxx = 0, sxy = 0, syy = 0;
  for (const auto& [bytes, seconds] : points) {
    const double dx = bytes - mean_x, dy = seconds - mean_y;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  RIDGE_CHECK(sxx > 0, "fit_stream: all {} points stream the same {} bytes; a rate needs two sizes",
              points.size(), mean_x);
  const double slope = sxy / sxx;
  StreamFit fit;
  fit.fixed_s = mean_y - slope * mean_x;
  fit.bytes_per_s = slope > 0 ? 1.0 / slope : 0.0;
  fit.r2 = syy > 0 ? sxy * sxy / (sxx * syy) : 1.0;
  fit.points = int(points.size());
  return fit;
}

}  // namespace ridge::perf
