// Backend::power_reading on the GPU (NVML through backend/cuda/nvml_power): present where the
// driver reports power, values in physical ranges, and the energy counter growing over a second
// of copies to the device by about what the board's power says (mean power between 30 W, below
// any H100/H200's idle draw, and the limit).
#include <chrono>
#include <cstdint>
#include <vector>

#include "harness.h"

namespace ridge::backend::gpu_test {
namespace {

TEST_F(GpuBackend, PowerReading) {
  const auto first = cuda().power_reading();
  if (!first) GTEST_SKIP() << "no NVML power readings here (a container without the driver's "
                              "management library?); the debug log says why";
  EXPECT_GT(first->power_limit_w, 100);
  EXPECT_LT(first->power_limit_w, 2500);
  EXPECT_GT(first->power_w, 10);
  EXPECT_LT(first->power_w, first->power_limit_w * 1.2);
  EXPECT_GT(first->sm_clock_mhz, 100);
  EXPECT_LT(first->sm_clock_mhz, 4000);

  // A second of 256 MiB copies to the device.
  const size_t bytes = size_t(256) << 20;
  Buffer b = cuda().allocate(bytes);
  std::vector<uint8_t> fill(bytes);
  for (size_t i = 0; i < bytes; ++i) fill[i] = uint8_t(i * 131 + 7);
  const auto t0 = std::chrono::steady_clock::now();
  const auto e0 = cuda().power_reading();
  ASSERT_TRUE(e0.has_value());
  double seconds = 0;
  while (seconds < 1.0) {
    for (int i = 0; i < 4; ++i) cuda().upload({}, b.data(), fill.data(), bytes);
    cuda().synchronize({});
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const auto e1 = cuda().power_reading();
  ASSERT_TRUE(e1.has_value());
  ASSERT_TRUE(e0->energy_j && e1->energy_j) << "no energy counter (every Hopper GPU has one)";
  const double mean_w = (*e1->energy_j - *e0->energy_j) / seconds;
  RecordProperty("mean_power_w", std::to_string(mean_w));
  EXPECT_GT(mean_w, 30) << "energy counter " << *e0->energy_j << " -> " << *e1->energy_j << " J";
  EXPECT_LT(mean_w, e1->power_limit_w * 1.2);
}

}  // namespace
}  // namespace ridge::backend::gpu_test
