#include "ridge/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "ridge/backend/cpu/quant.h"
#include "ridge/core/error.h"
#include "ridge/core/half.h"

namespace ridge::backend {

using cpu::dequantize_row;
using cpu::dot;

namespace {

void expect(bool ok, const char* op, const std::string& what) {
  if (!ok) fail("cpu backend {}: {}", op, what);
}

void expect_f32_2d(const Tensor& t, const char* op, const char* name) {
  expect(t.device == Device::cpu && t.dtype == DType::f32 && t.ndim == 2 && t.stride[1] == 1, op,
         fmt::format("{} must be a 2-D f32 host tensor with contiguous rows, got {}", name,
                     t.describe()));
}

inline float* frow(const Tensor& t, int64_t i) { return t.ptr<float>() + i * t.stride[0]; }

}  // namespace

CpuBackend::CpuBackend(int threads) : pool_(threads) {}

Buffer CpuBackend::allocate(size_t bytes) {
  void* p = bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
  if (bytes && !p) fail("cpu backend: cannot allocate {} bytes", bytes);
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

void CpuBackend::upload(const Stream&, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CpuBackend::download(const Stream&, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

std::string CpuBackend::name() const {
  return fmt::format("cpu ({} threads{})", pool_.size(), cpu::simd_available() ? ", AVX2" : "");
}

void CpuBackend::embedding(const Stream&, const Tensor& table, const Tensor& ids, Tensor& out) {
  expect_f32_2d(out, "embedding", "out");
  expect(table.ndim == 2 && table.shape[1] == out.shape[1], "embedding",
         fmt::format("table {} does not match out {}", table.describe(), out.describe()));
  expect(ids.dtype == DType::i32 && ids.numel() == out.shape[0], "embedding",
         fmt::format("ids {} do not match out {}", ids.describe(), out.describe()));
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < out.shape[0]; ++t) {
    RIDGE_CHECK(id[t] >= 0 && id[t] < table.shape[0], "token id {} is outside the vocabulary of {}",
                id[t], table.shape[0]);
    dequantize_row(table.dtype, table.row(id[t]), frow(out, t), table.shape[1]);
  }
}

namespace {
void rmsnorm_row(const float* x, float eps, float* out, int64_t n, const std::vector<float>& w) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(float(ss / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}
}  // namespace

void CpuBackend::rmsnorm(const Stream&, const Tensor& x, const Tensor& weight, float eps,
                         Tensor& out) {
  expect_f32_2d(x, "rmsnorm", "x");
  expect_f32_2d(out, "rmsnorm", "out");
  const int64_t n = x.shape[1];
  expect(weight.numel() == n && out.shape[0] == x.shape[0] && out.shape[1] == n, "rmsnorm",
         fmt::format("x {}, weight {}, out {}", x.describe(), weight.describe(), out.describe()));
  std::vector<float> w(n);
  dequantize_row(weight.dtype, weight.data, w.data(), n);
  for (int64_t t = 0; t < x.shape[0]; ++t) rmsnorm_row(frow(x, t), eps, frow(out, t), n, w);
}

void CpuBackend::add_rmsnorm(const Stream&, Tensor& residual, const Tensor& x,
                             const Tensor& weight, float eps, Tensor& out) {
  expect_f32_2d(residual, "add_rmsnorm", "residual");
  expect_f32_2d(x, "add_rmsnorm", "x");
  expect_f32_2d(out, "add_rmsnorm", "out");
  const int64_t n = x.shape[1];
  expect(residual.shape == x.shape && weight.numel() == n && out.shape == x.shape, "add_rmsnorm",
         fmt::format("residual {}, x {}, weight {}, out {}", residual.describe(), x.describe(),
                     weight.describe(), out.describe()));
  std::vector<float> w(n);
  dequantize_row(weight.dtype, weight.data, w.data(), n);
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    float* r = frow(residual, t);
    const float* xi = frow(x, t);
    for (int64_t i = 0; i < n; ++i) r[i] += xi[i];
    rmsnorm_row(r, eps, frow(out, t), n, w);
  }
}

void CpuBackend::matmul(const Stream&, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& out) {
  matmul_impl(x, w, bias, out, false);
}

void CpuBackend::matmul_add(const Stream&, const Tensor& x, const Tensor& w, Tensor& out) {
  matmul_impl(x, w, nullptr, out, true);
}

namespace {
// The 256 E4M3 codes' values.
const float* fp8_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8e4m3_to_f32(uint8_t(c));
    return t;
  }();
  return table.data();
}

// The CUDA backend's per-row rule (kernels::quantize_rows_fp8) on n fp32 values: the scale, and
// the codes' values (unscaled) in v.
float fp8_row(const float* x, int64_t n, uint8_t* codes, float* values) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = f32_to_fp8e4m3(x[i] / s);
    if (codes) codes[i] = c;
    if (values) values[i] = fp8_values()[c];
  }
  return s;
}
}  // namespace

bool CpuBackend::quantize_weight(Tensor& w, DType dtype) {
  if (dtype != DType::fp8_e4m3 || w.ndim != 2 || w.scales || w.dtype == DType::fp8_e4m3 ||
      !w.data || w.shape[0] < 16 || w.shape[0] % 16 != 0 || w.shape[1] < 16 || w.shape[1] % 16 != 0)
    return false;
  const int64_t N = w.shape[0], K = w.shape[1];
  std::vector<uint8_t>* codes_p;
  std::vector<float>* scales_p;
  {
    std::lock_guard lock(fp8_mutex_);
    codes_p = &fp8_codes_.emplace_back(size_t(N * K));
    scales_p = &fp8_scales_.emplace_back(size_t(N));
  }
  std::vector<uint8_t>& codes = *codes_p;
  std::vector<float>& scales = *scales_p;
  const Tensor src = w;
  pool_.parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        std::vector<float> row(static_cast<size_t>(K));
        for (int64_t n = n0; n < n1; ++n) {
          dequantize_row(src.dtype, src.row(n), row.data(), K);
          for (float& v : row) v = bf16_to_f32(f32_to_bf16(v));
          scales[size_t(n)] = fp8_row(row.data(), K, &codes[size_t(n * K)], nullptr);
        }
      },
      16);
  Tensor q(codes.data(), DType::fp8_e4m3, {N, K});
  q.scales = scales.data();
  w = q;
  return true;
}

void CpuBackend::matmul_fp8(const Tensor& x, const Tensor& w, const float* bias, Tensor& out,
                            bool accumulate) {
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  // Each token's activations as E4M3 values (unscaled) and its scale.
  std::vector<float> xv(static_cast<size_t>(T * K)), sx(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    sx[size_t(t)] = fp8_row(frow(x, t), K, nullptr, &xv[size_t(t * K)]);
  pool_.parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        std::vector<float> wv(static_cast<size_t>(K));
        for (int64_t n = n0; n < n1; ++n) {
          const uint8_t* c = w.row<uint8_t>(n);
          const float* table = fp8_values();
          for (int64_t k = 0; k < K; ++k) wv[size_t(k)] = table[c[k]];
          const float sw = w.scales[n];
          for (int64_t t = 0; t < T; ++t) {
            const float dot = cpu::dot_row(DType::f32, wv.data(), &xv[size_t(t * K)], nullptr, K);
            const float v = dot * (sx[size_t(t)] * sw) + (bias ? bias[n] : 0.0f);
            float& o = frow(out, t)[n];
            o = accumulate ? o + v : v;
          }
        }
      },
      16);
}

void CpuBackend::matmul_impl(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
                             bool accumulate) {
  expect_f32_2d(x, "matmul", "x");
  expect_f32_2d(out, "matmul", "out");
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  expect(w.ndim == 2 && w.shape[1] == K && out.shape[0] == T && out.shape[1] == N, "matmul",
         fmt::format("x {} · w {}ᵀ does not give out {}", x.describe(), w.describe(),
                     out.describe()));
  expect(!bias || bias->numel() == N, "matmul",
         fmt::format("bias {} does not match N = {}", bias ? bias->describe() : "", N));
  std::vector<float> b;
  if (bias) {
    b.resize(N);
    dequantize_row(bias->dtype, bias->data, b.data(), N);
  }
  if (w.dtype == DType::fp8_e4m3 && w.scales) {
    matmul_fp8(x, w, bias ? b.data() : nullptr, out, accumulate);
    return;
  }
  if (T <= cpu::kMaxDotTokens) {
    // Decode: the weight row is converted inside the dot products, once for all T tokens (one
    // pass over the weights; each token's sums in the same order whatever T is).
    std::vector<float> sums(size_t(T * (K / 32 + 1)));
    if (cpu::needs_block_sums(w.dtype))
      for (int64_t t = 0; t < T; ++t) cpu::block_sums(frow(x, t), &sums[size_t(t * (K / 32 + 1))], K);
    const float* xs[cpu::kMaxDotTokens];
    const float* bs[cpu::kMaxDotTokens];
    for (int64_t t = 0; t < T; ++t) xs[t] = frow(x, t), bs[t] = &sums[size_t(t * (K / 32 + 1))];
    pool_.parallel_for(
        N,
        [&](int64_t n0, int64_t n1) {
          float v[cpu::kMaxDotTokens];
          for (int64_t n = n0; n < n1; ++n) {
            cpu::dot_row_tokens(w.dtype, w.row(n), xs, bs, int(T), K, v);
            for (int64_t t = 0; t < T; ++t) {
              float& o = frow(out, t)[n];
              const float s = v[t] + (bias ? b[n] : 0.0f);
              o = accumulate ? o + s : s;
            }
          }
        },
        16);
    return;
  }
  // Prefill: each thread converts four weight rows at a time to fp32 and takes their dot
  // products with the tokens two at a time (cpu::dot_4x2: 8 accumulators, 6 loads per 8 FMAs);
  // x stays cache-resident across the rows. A group of fewer than four rows (a chunk's tail)
  // fills the kernel's other rows with copies of its last row, whose results are dropped.
  constexpr int64_t kRows = 4;
  pool_.parallel_for(
      N,
      [&](int64_t n0, int64_t n1) {
        std::vector<float> wrow(size_t(kRows * K));
        for (int64_t n = n0; n < n1; n += kRows) {
          const int64_t rows = std::min(kRows, n1 - n);
          for (int64_t r = 0; r < kRows; ++r)
            dequantize_row(w.dtype, w.row(n + std::min(r, rows - 1)), &wrow[r * K], K);
          for (int64_t t = 0; t < T; t += 2) {
            const bool two = t + 1 < T;
            float v[8];
            cpu::dot_4x2(wrow.data(), K, frow(x, t), two ? frow(x, t + 1) : nullptr, K, v);
            for (int64_t u = 0; u < (two ? 2 : 1); ++u) {
              float* ot = frow(out, t + u);
              for (int64_t r = 0; r < rows; ++r) {
                const float s = v[2 * r + u] + (bias ? b[n + r] : 0.0f);
                ot[n + r] = accumulate ? ot[n + r] + s : s;
              }
            }
          }
        }
      },
      16);
}

void CpuBackend::rope(const Stream&, Tensor& q, Tensor& k, const Tensor& positions,
                      const Tensor& inv_freq) {
  expect_f32_2d(q, "rope", "q");
  expect_f32_2d(k, "rope", "k");
  const int64_t half = inv_freq.numel(), hd = 2 * half, T = q.shape[0];
  expect(inv_freq.dtype == DType::f32 && q.shape[1] % hd == 0 && k.shape[1] % hd == 0 &&
             k.shape[0] == T && positions.numel() == T && positions.dtype == DType::i32,
         "rope",
         fmt::format("q {}, k {}, positions {}, inv_freq {}", q.describe(), k.describe(),
                     positions.describe(), inv_freq.describe()));
  const float* f = inv_freq.ptr<float>();
  const int32_t* pos = positions.ptr<int32_t>();
  std::vector<float> cs(2 * half);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(pos[t]) * f[i];  // fp32 product, as HF computes it
      cs[2 * i] = float(std::cos(double(angle)));
      cs[2 * i + 1] = float(std::sin(double(angle)));
    }
    for (Tensor* m : {&q, &k}) {
      float* row = frow(*m, t);
      for (int64_t h = 0; h < m->shape[1] / hd; ++h) {
        float* x = row + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float a = x[i], b = x[i + half], c = cs[2 * i], s = cs[2 * i + 1];
          x[i] = a * c - b * s;
          x[i + half] = b * c + a * s;
        }
      }
    }
  }
}

void CpuBackend::kv_store(const Stream&, const Tensor& k, const Tensor& v, const Tensor& slots,
                          KvLayer& kv) {
  expect_f32_2d(k, "kv_store", "k");
  expect_f32_2d(v, "kv_store", "v");
  const int64_t num_slots = kv.k.shape[0] * kv.k.shape[1];
  const int64_t width = kv.k.shape[2] * kv.k.shape[3];
  expect(k.shape[1] == width && v.shape[1] == width && slots.dtype == DType::i32 &&
             slots.numel() == k.shape[0] && kv.k.is_contiguous() && kv.v.is_contiguous(),
         "kv_store",
         fmt::format("k {}, v {}, slots {}, pool {}", k.describe(), v.describe(),
                     slots.describe(), kv.k.describe()));
  const size_t row = ridge::row_bytes(kv.k.dtype, width);
  const int32_t* slot = slots.ptr<int32_t>();
  for (int64_t t = 0; t < k.shape[0]; ++t) {
    if (slot[t] == -1) continue;  // a padding row (backend.h)
    RIDGE_CHECK(slot[t] >= 0 && slot[t] < num_slots, "kv_store: slot {} is outside the pool of {}",
                slot[t], num_slots);
    cpu::store_row(kv.k.dtype, frow(k, t), static_cast<char*>(kv.k.data) + slot[t] * row, width);
    cpu::store_row(kv.v.dtype, frow(v, t), static_cast<char*>(kv.v.data) + slot[t] * row, width);
  }
}

void CpuBackend::attention(const Stream&, const Tensor& q, const KvLayer& kv,
                           const AttentionMeta& meta, float scale, Tensor& out) {
  expect_f32_2d(q, "attention", "q");
  expect_f32_2d(out, "attention", "out");
  const int64_t block_size = kv.k.shape[1], nkv = kv.k.shape[2], hd = kv.k.shape[3];
  const int64_t nh = q.shape[1] / hd;
  expect(q.shape[1] == nh * hd && nh % nkv == 0 && out.shape == q.shape && meta.host_cu_seqlens_q &&
             meta.host_context_lens && meta.host_block_tables,
         "attention",
         fmt::format("q {}, pool {}, out {}", q.describe(), kv.k.describe(), out.describe()));
  const int64_t group = nh / nkv;
  const size_t kv_row = ridge::row_bytes(kv.k.dtype, nkv * hd);
  const int32_t* cu = meta.host_cu_seqlens_q;
  // Work items: (token, head).
  std::vector<int32_t> token_seq(size_t(q.shape[0]));
  for (int32_t s = 0; s < meta.num_seqs; ++s) {
    const int32_t q_len = cu[s + 1] - cu[s];
    RIDGE_CHECK(q_len >= 0 && q_len <= meta.host_context_lens[s] && cu[s + 1] <= q.shape[0],
                "attention: sequence {} has {} new tokens but context {}", s, q_len,
                meta.host_context_lens[s]);
    RIDGE_CHECK((meta.host_context_lens[s] + block_size - 1) / block_size <= meta.max_blocks_per_seq,
                "attention: sequence {} context {} needs more than {} blocks", s,
                meta.host_context_lens[s], meta.max_blocks_per_seq);
    for (int32_t i = cu[s]; i < cu[s + 1]; ++i) token_seq[i] = s;
  }
  const int64_t items = cu[meta.num_seqs] * nh;
  pool_.parallel_for(items, [&](int64_t b, int64_t e) {
    std::vector<float> scores, krow(static_cast<size_t>(hd)), acc(static_cast<size_t>(hd));
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / nh, h = item % nh, kh = h / group;
      const int32_t s = token_seq[t];
      const int32_t q_len = cu[s + 1] - cu[s];
      const int32_t ctx = meta.host_context_lens[s];
      const int32_t pos = ctx - q_len + int32_t(t - cu[s]);  // this token's position
      const int32_t* table = meta.host_block_tables + int64_t(s) * meta.max_blocks_per_seq;
      const float* qh = frow(q, t) + h * hd;
      scores.resize(size_t(pos + 1));
      // Position j's K or V row of this head: read in place when the pool is f32 (the CPU's
      // default), else converted into krow.
      auto kv_row_of = [&](const Tensor& pool, int32_t j) -> const float* {
        const int64_t slot = int64_t(table[j / block_size]) * block_size + j % block_size;
        const char* src = static_cast<const char*>(pool.data) + slot * kv_row +
                          ridge::row_bytes(pool.dtype, kh * hd);
        if (pool.dtype == DType::f32) return reinterpret_cast<const float*>(src);
        dequantize_row(pool.dtype, src, krow.data(), hd);
        return krow.data();
      };
      // f32 pools: a page's rows of this head are kv_row bytes apart, read in place a page at a
      // time (cpu::dot_rows / axpy_rows: four scores per pass over q, the output accumulator in
      // registers); else one converted row at a time.
      const bool paged = kv.k.dtype == DType::f32 && kv.v.dtype == DType::f32;
      const int64_t stride = int64_t(kv_row / sizeof(float));
      for (int32_t j0 = 0; paged && j0 <= pos; j0 += int32_t(block_size))
        cpu::dot_rows(qh, kv_row_of(kv.k, j0), stride, std::min<int64_t>(block_size, pos + 1 - j0),
                      hd, &scores[size_t(j0)]);
      float mx = -INFINITY;
      for (int32_t j = 0; j <= pos; ++j) {
        scores[j] = (paged ? scores[j] : dot(qh, kv_row_of(kv.k, j), hd)) * scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int32_t j = 0; j <= pos; ++j) {
        scores[j] = std::exp(scores[j] - mx);
        sum += scores[j];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      if (paged) {
        for (int32_t j0 = 0; j0 <= pos; j0 += int32_t(block_size))
          cpu::axpy_rows(&scores[size_t(j0)], kv_row_of(kv.v, j0), stride,
                         std::min<int64_t>(block_size, pos + 1 - j0), hd, acc.data());
      } else {
        for (int32_t j = 0; j <= pos; ++j) cpu::axpy(scores[j], kv_row_of(kv.v, j), acc.data(), hd);
      }
      float* o = frow(out, t) + h * hd;
      const float inv = float(1.0 / sum);
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  });
}

void CpuBackend::silu_mul(const Stream&, const Tensor& gate_up, Tensor& out) {
  expect_f32_2d(gate_up, "silu_mul", "gate_up");
  expect_f32_2d(out, "silu_mul", "out");
  const int64_t F = out.shape[1];
  expect(gate_up.shape[1] == 2 * F && gate_up.shape[0] == out.shape[0], "silu_mul",
         fmt::format("gate_up {} does not match out {}", gate_up.describe(), out.describe()));
  pool_.parallel_for(
      out.shape[0],
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* g = frow(gate_up, t);
          const float* u = g + F;
          float* o = frow(out, t);
          for (int64_t i = 0; i < F; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        }
      },
      4);
}

void CpuBackend::gather_rows(const Stream&, const Tensor& x, const Tensor& rows, Tensor& out) {
  expect_f32_2d(x, "gather_rows", "x");
  expect_f32_2d(out, "gather_rows", "out");
  expect(rows.dtype == DType::i32 && rows.numel() == out.shape[0] && out.shape[1] == x.shape[1],
         "gather_rows",
         fmt::format("x {}, rows {}, out {}", x.describe(), rows.describe(), out.describe()));
  const int32_t* r = rows.ptr<int32_t>();
  for (int64_t i = 0; i < out.shape[0]; ++i) {
    RIDGE_CHECK(r[i] >= 0 && r[i] < x.shape[0], "gather_rows: row {} is outside {}", r[i],
                x.shape[0]);
    std::copy_n(frow(x, r[i]), x.shape[1], frow(out, i));
  }
}

}  // namespace ridge::backend
