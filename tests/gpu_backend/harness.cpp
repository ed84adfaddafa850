#include "harness.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/backend/factory.h"

namespace ridge::backend::gpu_test {

namespace {

struct Record {
  std::string op, what;
  double err, bound;
  bool ok;
};
std::vector<Record>& records() {
  static std::vector<Record> r;
  return r;
}

// Writes the comparisons as JSON at exit when RIDGE_GPU_BACKEND_REPORT names a file.
class ReportEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* path = std::getenv("RIDGE_GPU_BACKEND_REPORT");
    if (!path || records().empty()) return;
    std::ofstream f(path);
    f << "[\n";
    for (size_t i = 0; i < records().size(); ++i) {
      const Record& r = records()[i];
      f << fmt::format("  {{\"op\": \"{}\", \"case\": \"{}\", \"rel_err\": {:.3e}, \"bound\": {:.1e}, "
                       "\"ok\": {}}}{}\n",
                       r.op, r.what, r.err, r.bound, r.ok ? "true" : "false",
                       i + 1 < records().size() ? "," : "");
    }
    f << "]\n";
  }
};
const auto* const kReport = ::testing::AddGlobalTestEnvironment(new ReportEnvironment);

}  // namespace

void GpuBackend::SetUp() {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
}

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

Backend& cuda() {
  static std::unique_ptr<Backend> b = make_backend("cuda");
  return *b;
}

Backend& cpu() {
  static CpuBackend b(0);
  return b;
}

std::vector<float> random_bf16(size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) {
    float y = d(rng());
    if (y == 0.0f) y = scale * 0.5f;  // never zeros
    x = bf16_to_f32(f32_to_bf16(y));
  }
  return v;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

namespace {
DeviceMatrix make_matrix(DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t offset) {
  if (ld == 0) ld = cols;
  DeviceMatrix m;
  m.total_elems = offset + rows * ld + 7;  // slack after the last row
  const size_t esz = dtype == DType::f32 ? 4 : 2;
  m.buffer = cuda().allocate(size_t(m.total_elems) * esz);
  std::vector<uint8_t> poison(size_t(m.total_elems) * esz, 0xff);
  if (dtype == DType::bf16)
    for (int64_t i = 0; i < m.total_elems; ++i) std::memcpy(&poison[2 * i], &kPoisonBf16, 2);
  cuda().upload({}, m.buffer.data(), poison.data(), poison.size());
  m.view = Tensor(static_cast<char*>(m.buffer.data()) + offset * int64_t(esz), dtype,
                  {rows, cols}, Device::cuda);
  m.view.stride[0] = ld;
  return m;
}
}  // namespace

DeviceMatrix device_bf16(int64_t rows, int64_t cols, const std::vector<float>& values, int64_t ld,
                         int64_t offset) {
  DeviceMatrix m = make_matrix(DType::bf16, rows, cols, ld, offset);
  if (!values.empty()) {
    const std::vector<uint16_t> bits = to_bf16_bits(values);
    for (int64_t r = 0; r < rows; ++r)
      cuda().upload({}, m.view.row(r), bits.data() + r * cols, size_t(cols) * 2);
  }
  cuda().synchronize({});
  return m;
}

DeviceMatrix device_f32(int64_t rows, int64_t cols, int64_t ld, int64_t offset) {
  DeviceMatrix m = make_matrix(DType::f32, rows, cols, ld, offset);
  cuda().synchronize({});
  return m;
}

Tensor device_i32(Buffer& keep, const std::vector<int32_t>& v) {
  keep = cuda().allocate(std::max<size_t>(v.size(), 1) * 4);
  if (!v.empty()) cuda().upload({}, keep.data(), v.data(), v.size() * 4);
  cuda().synchronize({});
  return Tensor(keep.data(), DType::i32, {int64_t(v.size())}, Device::cuda);
}

std::vector<uint16_t> download_bits(const DeviceMatrix& m) {
  const size_t esz = m.view.dtype == DType::f32 ? 4 : 2;
  std::vector<uint16_t> b(size_t(m.total_elems) * esz / 2);
  cuda().download({}, b.data(), m.buffer.data(), b.size() * 2);
  cuda().synchronize({});
  return b;
}

std::vector<float> download_view(const DeviceMatrix& m) {
  const int64_t rows = m.view.shape[0], cols = m.view.shape[1];
  std::vector<float> out(size_t(rows * cols));
  if (m.view.dtype == DType::f32) {
    for (int64_t r = 0; r < rows; ++r)
      cuda().download({}, &out[size_t(r * cols)], m.view.row(r), size_t(cols) * 4);
  } else {
    std::vector<uint16_t> bits(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      cuda().download({}, &bits[size_t(r * cols)], m.view.row(r), size_t(cols) * 2);
    for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_f32(bits[i]);
  }
  cuda().synchronize({});
  return out;
}

void expect_close(const std::string& op, const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& ref, double bound) {
  ASSERT_EQ(got.size(), ref.size()) << op << " " << what;
  double num = 0, den = 0;
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      if (bad++ == 0) first_bad = i;
      continue;
    }
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  const double err = bad ? INFINITY : std::sqrt(num / std::max(den, 1e-30));
  const bool ok = bad == 0 && err <= bound;
  records().push_back({op, what, err, bound, ok});
  std::printf("RESULT %-12s %-58s rel_err %.3e (bound %.0e)%s\n", op.c_str(), what.c_str(), err,
              bound, ok ? "" : "  FAIL");
  EXPECT_EQ(bad, 0u) << op << " " << what << ": " << bad << " non-finite outputs, first at "
                     << first_bad << " (unwritten or NaN)";
  EXPECT_LE(err, bound) << op << " " << what;
}

void expect_untouched_outside(const std::string& op, const DeviceMatrix& m) {
  const std::vector<uint16_t> bits = download_bits(m);
  const size_t esz = m.view.dtype == DType::f32 ? 4 : 2;
  const auto base = static_cast<const char*>(m.buffer.data());
  const int64_t offset = (static_cast<const char*>(m.view.data) - base) / int64_t(esz);
  const int64_t rows = m.view.shape[0], cols = m.view.shape[1], ld = m.view.stride[0];
  size_t touched = 0;
  for (int64_t e = 0; e < m.total_elems; ++e) {
    const int64_t rel = e - offset;
    const bool inside = rel >= 0 && rel / ld < rows && rel % ld < cols;
    if (inside) continue;
    const bool poisoned = esz == 2 ? bits[size_t(e)] == kPoisonBf16
                                   : (bits[size_t(2 * e)] == 0xffff && bits[size_t(2 * e + 1)] == 0xffff);
    if (!poisoned) ++touched;
  }
  EXPECT_EQ(touched, 0u) << op << ": " << touched << " elements outside the output view were written";
}

}  // namespace ridge::backend::gpu_test
