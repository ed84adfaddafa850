// CudaBackend::sample: Backend::sample over the GPU sampler (kernels/cuda/sampling). Per call:
// the rows' parameters, penalty lists and bias lists are packed into pinned staging memory and
// uploaded in one copy, the kernel runs one block per row, nothing is allocated once the grow-only
// buffers have reached the largest batch, and nothing synchronizes (except before reusing the
// staging memory, on the previous call's upload, and before a buffer grows).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ridge/backend/cuda/cuda_backend.h"
#include "ridge/core/error.h"
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/sampling/sampling.h"

namespace ridge::backend {

struct CudaBackend::SamplingBuffers {
  void* host = nullptr;  // pinned: [params][penalty ids][penalty counts][bias ids][bias values]
                         // [ban masks]
  size_t host_bytes = 0;
  cuda::DeviceMemory device;  // the same layout on the device
  cuda::DeviceMemory workspace;
  cudaEvent_t uploaded = nullptr;  // recorded after the last upload out of `host`
  bool upload_pending = false;

  SamplingBuffers() {
    RIDGE_CHECK_CUDA(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
  }
  ~SamplingBuffers() {
    if (uploaded) (void)cudaEventDestroy(uploaded);
    if (host) (void)cudaFreeHost(host);
  }
  SamplingBuffers(const SamplingBuffers&) = delete;
  SamplingBuffers& operator=(const SamplingBuffers&) = delete;
};

namespace {

size_t align16(size_t n) {
  return (n + 15) / 16 * 16;
}
size_t grown(size_t need, size_t have) {
  return std::max(need, have + have / 2);
}

void expect_device(const Tensor& t, DType dtype, const char* name, int64_t min_numel) {
  RIDGE_CHECK(t.device == Device::cuda && t.dtype == dtype && t.data && t.is_contiguous() &&
                  t.numel() >= min_numel,
              "cuda backend sample: {} must be a contiguous {} device tensor of at least {} "
              "values, got {}{}",
              name, dtype_name(dtype), min_numel, t.describe(),
              t.device == Device::cuda ? "" : " on the host");
}

// The kernel works on a copy of the row (kernels::sample_workspace_bytes) when this holds.
bool adjusts_logits(const SampleRow& r) {
  return r.bias_end > r.bias_begin || r.ban_mask >= 0 ||
         (r.penalty_end > r.penalty_begin &&
          (r.repetition_penalty != 1.0f || r.presence_penalty != 0.0f ||
           r.frequency_penalty != 0.0f));
}

}  // namespace

bool CudaBackend::sample(const Stream& s, const Tensor& logits, const SamplingBatch& batch,
                         Tensor& tokens, Tensor& logprobs, Tensor& top_ids, Tensor& top_logprobs) {
  const int64_t R = int64_t(batch.rows.size());
  RIDGE_CHECK(logits.device == Device::cuda && logits.dtype == DType::f32 && logits.ndim == 2 &&
                  logits.stride[1] == 1 && logits.stride[0] >= logits.shape[1] && logits.data &&
                  logits.shape[0] == R,
              "cuda backend sample: logits must be a 2-D f32 device tensor of {} rows (one per "
              "batch row) with contiguous rows, got {}",
              R, logits.describe());
  const int64_t V = logits.shape[1];
  if (V > kernels::kSampleMaxVocab) return false;  // the caller samples on the host
  RIDGE_CHECK(V >= 1, "cuda backend sample: empty logits rows");
  if (R == 0) return true;
  expect_device(tokens, DType::i32, "tokens", R);
  expect_device(logprobs, DType::f32, "logprobs", R);
  const int64_t P = int64_t(batch.penalty_tokens.size());
  RIDGE_CHECK(batch.penalty_counts.size() == batch.penalty_tokens.size(),
              "cuda backend sample: {} penalty tokens but {} counts", P,
              batch.penalty_counts.size());
  const int64_t B = int64_t(batch.bias_tokens.size());
  RIDGE_CHECK(batch.bias_values.size() == batch.bias_tokens.size(),
              "cuda backend sample: {} bias tokens but {} values", B, batch.bias_values.size());
  for (int64_t e = 0; e < B; ++e)
    RIDGE_CHECK(
        !std::isnan(batch.bias_values[size_t(e)]) && batch.bias_values[size_t(e)] != INFINITY,
        "cuda backend sample: bias entry {} (token {}) is {}; biases are finite or -inf", e,
        batch.bias_tokens[size_t(e)], batch.bias_values[size_t(e)]);
  const int64_t mask_words = (V + 31) / 32, M = int64_t(batch.ban_masks.size());
  int32_t want_top = 0;
  bool any_adjusted = false;
  for (int64_t r = 0; r < R; ++r) {
    const SampleRow& row = batch.rows[size_t(r)];
    RIDGE_CHECK(std::isfinite(row.temperature) && row.temperature >= 0 && row.top_p > 0 &&
                    row.top_p <= 1 && row.min_p >= 0 && row.min_p <= 1 && row.top_k >= 0 &&
                    row.top_logprobs >= 0 && row.top_logprobs <= kernels::kSampleMaxTopLogprobs &&
                    std::isfinite(row.repetition_penalty) && row.repetition_penalty > 0 &&
                    std::isfinite(row.presence_penalty) && std::isfinite(row.frequency_penalty),
                "cuda backend sample: row {} has parameters out of range (temperature {}, top_p "
                "{}, min_p {}, top_k {}, top_logprobs {}, penalties {}/{}/{})",
                r, row.temperature, row.top_p, row.min_p, row.top_k, row.top_logprobs,
                row.repetition_penalty, row.presence_penalty, row.frequency_penalty);
    RIDGE_CHECK(
        row.penalty_begin >= 0 && row.penalty_begin <= row.penalty_end && row.penalty_end <= P,
        "cuda backend sample: row {} penalty entries [{}, {}) outside the {} given", r,
        row.penalty_begin, row.penalty_end, P);
    RIDGE_CHECK(row.bias_begin >= 0 && row.bias_begin <= row.bias_end && row.bias_end <= B,
                "cuda backend sample: row {} bias entries [{}, {}) outside the {} given", r,
                row.bias_begin, row.bias_end, B);
    RIDGE_CHECK(row.ban_mask >= -1 && (int64_t(row.ban_mask) + 1) * mask_words <= M,
                "cuda backend sample: row {} ban mask {} past the {} words given ({} a mask)", r,
                row.ban_mask, M, mask_words);
    want_top = std::max(want_top, row.top_logprobs);
    any_adjusted = any_adjusted || adjusts_logits(row);
  }
  int64_t top_n = 0;
  if (want_top > 0 || top_ids.data != nullptr) {
    RIDGE_CHECK(top_ids.ndim == 2 && top_logprobs.ndim == 2 && top_ids.shape[0] == R &&
                    top_logprobs.shape == top_ids.shape && top_ids.shape[1] >= want_top &&
                    top_ids.shape[1] <= kernels::kSampleMaxTopLogprobs,
                "cuda backend sample: top_ids {} and top_logprobs {} must both be [{}, N] with "
                "{} <= N <= 20",
                top_ids.describe(), top_logprobs.describe(), R, want_top);
    top_n = top_ids.shape[1];
    expect_device(top_ids, DType::i32, "top_ids", R * top_n);
    expect_device(top_logprobs, DType::f32, "top_logprobs", R * top_n);
  }

  const cudaStream_t stream = stream_of(s);
  std::lock_guard lock(sampling_mutex_);
  if (!sampling_) sampling_ = {new SamplingBuffers, [](SamplingBuffers* b) { delete b; }};
  SamplingBuffers& b = *sampling_;

  // Staging layout: params, penalty ids, penalty counts, bias ids, bias values (each 16-byte
  // aligned).
  const size_t params_bytes = align16(size_t(R) * sizeof(kernels::SampleRowParams));
  const size_t ids_bytes = align16(size_t(P) * sizeof(int32_t));
  const size_t bias_bytes = align16(size_t(B) * sizeof(int32_t));
  const size_t bias_at = params_bytes + 2 * ids_bytes;
  const size_t masks_at = bias_at + 2 * bias_bytes;
  const size_t bytes = masks_at + align16(size_t(M) * sizeof(uint32_t));
  if (b.upload_pending) {  // the previous call's upload still reads the staging memory
    RIDGE_CHECK_CUDA(cudaEventSynchronize(b.uploaded));
    b.upload_pending = false;
  }
  if (bytes > b.host_bytes) {
    if (b.host) RIDGE_CHECK_CUDA(cudaFreeHost(b.host));
    b.host = nullptr;
    b.host_bytes = 0;
    const size_t n = grown(bytes, 0);
    RIDGE_CHECK_CUDA(cudaMallocHost(&b.host, n));
    b.host_bytes = n;
  }
  const size_t ws_bytes = kernels::sample_workspace_bytes(R, V, any_adjusted);
  if (bytes > b.device.size() || ws_bytes > b.workspace.size()) {
    // A kernel of an earlier call may still read the buffers being replaced.
    RIDGE_CHECK_CUDA(cudaDeviceSynchronize());
    if (bytes > b.device.size()) b.device = cuda::DeviceMemory(grown(bytes, b.device.size()));
    if (ws_bytes > b.workspace.size())
      b.workspace = cuda::DeviceMemory(grown(ws_bytes, b.workspace.size()));
  }

  char* host = static_cast<char*>(b.host);
  auto* params = reinterpret_cast<kernels::SampleRowParams*>(host);
  for (int64_t r = 0; r < R; ++r) {
    const SampleRow& row = batch.rows[size_t(r)];
    kernels::SampleRowParams& p = params[r];
    p = kernels::SampleRowParams{};
    p.temperature = row.temperature;
    p.top_k = row.top_k;
    p.top_p = row.top_p;
    p.min_p = row.min_p;
    p.repetition_penalty = row.repetition_penalty;
    p.presence_penalty = row.presence_penalty;
    p.frequency_penalty = row.frequency_penalty;
    p.top_logprobs = row.top_logprobs;
    p.seed = row.seed;
    p.step = row.step;
    p.penalty_begin = row.penalty_begin;
    p.penalty_end = row.penalty_end;
    p.bias_begin = row.bias_begin;
    p.bias_end = row.bias_end;
    p.ban_mask = row.ban_mask;
  }
  if (P > 0) {
    std::memcpy(host + params_bytes, batch.penalty_tokens.data(), size_t(P) * sizeof(int32_t));
    std::memcpy(host + params_bytes + ids_bytes, batch.penalty_counts.data(),
                size_t(P) * sizeof(int32_t));
  }
  if (B > 0) {
    std::memcpy(host + bias_at, batch.bias_tokens.data(), size_t(B) * sizeof(int32_t));
    std::memcpy(host + bias_at + bias_bytes, batch.bias_values.data(), size_t(B) * sizeof(float));
  }
  if (M > 0) std::memcpy(host + masks_at, batch.ban_masks.data(), size_t(M) * sizeof(uint32_t));
  RIDGE_CHECK_CUDA(cudaMemcpyAsync(b.device.data(), host, bytes, cudaMemcpyHostToDevice, stream));
  RIDGE_CHECK_CUDA(cudaEventRecord(b.uploaded, stream));
  b.upload_pending = true;

  char* dev = static_cast<char*>(b.device.data());
  kernels::SampleArgs a;
  a.logits = logits.ptr<float>();
  a.ld = logits.stride[0];
  a.rows = R;
  a.vocab = V;
  a.params = reinterpret_cast<const kernels::SampleRowParams*>(dev);
  a.penalty_ids = reinterpret_cast<const int32_t*>(dev + params_bytes);
  a.penalty_counts = reinterpret_cast<const int32_t*>(dev + params_bytes + ids_bytes);
  a.bias_ids = reinterpret_cast<const int32_t*>(dev + bias_at);
  a.bias_values = reinterpret_cast<const float*>(dev + bias_at + bias_bytes);
  a.ban_masks = reinterpret_cast<const uint32_t*>(dev + masks_at);
  a.workspace = ws_bytes ? static_cast<float*>(b.workspace.data()) : nullptr;
  a.tokens = tokens.ptr<int32_t>();
  a.logprobs = logprobs.ptr<float>();
  a.top_ids = top_n ? top_ids.ptr<int32_t>() : nullptr;
  a.top_logprobs = top_n ? top_logprobs.ptr<float>() : nullptr;
  a.top_n = int32_t(top_n);
  kernels::sample(a, stream);
  return true;
}

}  // namespace ridge::backend
