// A Backend that runs every op on the CPU reference (CpuBackend), for model tests that change one
// behaviour (graph capture, weight folding) and keep the rest exact: subclasses override only what
// they test.
#pragma once

#include <list>
#include <span>
#include <string>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/backend/cpu/quant.h"

namespace ridge::model {

class CpuDelegate : public backend::Backend {
 public:
  using Stream = backend::Stream;
  Device device() const override { return Device::cpu; }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }
  std::vector<DType> kv_dtypes() const override { return cpu_.kv_dtypes(); }
  backend::Buffer allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void upload(const Stream& s, void* d, const void* h, size_t n) override { cpu_.upload(s, d, h, n); }
  void download(const Stream& s, void* h, const void* d, size_t n) override {
    cpu_.download(s, h, d, n);
  }
  void synchronize(const Stream& s) override { cpu_.synchronize(s); }
  Tensor upload_weight(const Tensor& host) override { return cpu_.upload_weight(host); }
  void embedding(const Stream& s, const Tensor& t, const Tensor& ids, Tensor& out) override {
    cpu_.embedding(s, t, ids, out);
  }
  void rmsnorm(const Stream& s, const Tensor& x, const Tensor& w, float eps, Tensor& out) override {
    cpu_.rmsnorm(s, x, w, eps, out);
  }
  void add_rmsnorm(const Stream& s, Tensor& r, const Tensor& x, const Tensor& w, float eps,
                   Tensor& out) override {
    cpu_.add_rmsnorm(s, r, x, w, eps, out);
  }
  void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* b,
              Tensor& out) override {
    cpu_.matmul(s, x, w, b, out);
  }
  void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) override {
    cpu_.matmul_add(s, x, w, out);
  }
  void rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& pos, const Tensor& f) override {
    cpu_.rope(s, q, k, pos, f);
  }
  void kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                backend::KvLayer& kv) override {
    cpu_.kv_store(s, k, v, slots, kv);
  }
  void attention(const Stream& s, const Tensor& q, const backend::KvLayer& kv,
                 const backend::AttentionMeta& meta, float scale, Tensor& out) override {
    cpu_.attention(s, q, kv, meta, scale, out);
  }
  void silu_mul(const Stream& s, const Tensor& gu, Tensor& out) override { cpu_.silu_mul(s, gu, out); }
  void gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) override {
    cpu_.gather_rows(s, x, rows, out);
  }

 protected:
  backend::CpuBackend cpu_{2};

  // parts stacked along dim 0 into an f32 matrix this backend owns (as the CUDA backend stacks
  // q|k|v and gate|up), each row dequantized from its stored dtype; empty for vectors.
  Tensor stack_rows(std::span<const Tensor> parts) {
    if (parts.empty() || parts[0].ndim != 2) return {};
    const int64_t K = parts[0].shape[1];
    int64_t rows = 0;
    for (const Tensor& p : parts) rows += p.shape[0];
    std::vector<float>& w = owned_.emplace_back(size_t(rows * K));
    int64_t r0 = 0;
    for (const Tensor& p : parts)
      for (int64_t r = 0; r < p.shape[0]; ++r, ++r0)
        backend::cpu::dequantize_row(p.dtype, p.row(r), &w[size_t(r0 * K)], K);
    return Tensor(w.data(), DType::f32, {rows, K});
  }
  std::list<std::vector<float>> owned_;  // matrices made by stack_rows and subclasses
};

}  // namespace ridge::model
