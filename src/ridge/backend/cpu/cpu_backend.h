// CpuBackend: the reference implementation of every op (backend.h). fp32 activations and
// accumulation; weights stay in their stored dtype and are converted a row at a time inside the
// matmul. Multithreaded over output rows/heads with a static split (deterministic results).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/core/thread_pool.h"

namespace ridge::backend {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads = 0);
  Device device() const override { return Device::cpu; }
  std::string name() const override;
  DType activation_dtype() const override { return DType::f32; }
  std::vector<DType> kv_dtypes() const override {
    return {DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3};
  }
  int threads() const { return pool_.size(); }

  Buffer allocate(size_t bytes) override;
  void upload(const Stream& s, void* dst, const void* src, size_t bytes) override;
  void download(const Stream& s, void* dst, const void* src, size_t bytes) override;
  void synchronize(const Stream&) override {}
  Tensor upload_weight(const Tensor& host) override { return host; }
  // fp8_e4m3 with per-row scales, as the CUDA backend's (N and K multiples of 16): each row's
  // values rounded to bf16 first (what the GPU holds before it quantizes), amax / 448, E4M3 codes
  // of value / scale; the codes and scales are owned here. Its matmuls quantize each token's fp32
  // activations the same way and return sx[t] · sw[n] · Σ code values, accumulated in fp32.
  bool quantize_weight(Tensor& w, DType dtype) override;

  void embedding(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out) override;
  void rmsnorm(const Stream& s, const Tensor& x, const Tensor& weight, float eps,
               Tensor& out) override;
  void add_rmsnorm(const Stream& s, Tensor& residual, const Tensor& x, const Tensor& weight,
                   float eps, Tensor& out) override;
  void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
              Tensor& out) override;
  void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) override;
  void rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
            const Tensor& inv_freq) override;
  void kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                KvLayer& kv) override;
  void attention(const Stream& s, const Tensor& q, const KvLayer& kv, const AttentionMeta& meta,
                 float scale, Tensor& out) override;
  void silu_mul(const Stream& s, const Tensor& gate_up, Tensor& out) override;
  void gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) override;

 private:
  void matmul_impl(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out,
                   bool accumulate);
  void matmul_fp8(const Tensor& x, const Tensor& w, const float* bias, Tensor& out,
                  bool accumulate);
  ThreadPool pool_;
  std::mutex fp8_mutex_;  // quantize_weight may be called from several loading threads
  std::list<std::vector<uint8_t>> fp8_codes_;  // quantize_weight's, kept for the backend's life
  std::list<std::vector<float>> fp8_scales_;
};

}  // namespace ridge::backend
