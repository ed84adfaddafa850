#include "ridge/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "ridge/core/error.h"
#include "ridge/core/log.h"
#include "ridge/kernels/cuda/attention/paged_attention.h"
#include "ridge/kernels/cuda/decode/decode_layers.h"
#include "ridge/kernels/cuda/elementwise/check.h"
#include "ridge/kernels/cuda/elementwise/elementwise.h"
#include "ridge/kernels/cuda/gemm/gemm.h"
#include "ridge/kernels/cuda/pdl.h"

namespace ridge::backend {

namespace {

// An integer knob for A/B runs: its value, or `fallback` where it is unset or empty.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// An experiment knob for A/B runs on the GPU machine: RIDGE_ATTN_BLOCK_ROWS=64|128 forces the
// general attention kernel's rows per block (0 or unset: the kernel's automatic choice).
int attention_block_rows() {
  static const int rows = [] {
    const int r = env_int("RIDGE_ATTN_BLOCK_ROWS", 0);
    return r == 64 || r == 128 ? r : 0;
  }();
  return rows;
}

// An on/off knob for A/B runs on the GPU machine: "0" off, any other value on, unset or empty
// `fallback`. The knobs below keep their first reading (function statics).
bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::string_view(v) != "0";
}

// The decode attention kernels' on/off knobs: RIDGE_ATTN_<NAME>=0 / 1 sets a PagedAttentionArgs
// field, unset leaves its default (each keeps its first reading).
//   RIDGE_ATTN_EARLY_KV      early_kv: the decode kernel's KV loads before its PDL wait
//   RIDGE_ATTN_FILL_RING     decode_fill_ring: its prologue fills the whole ring
//   RIDGE_ATTN_SKIP_EMPTY    decode_skip_empty: its warps skip tiles with none of their positions
//                            in range
//   RIDGE_ATTN_CLUSTER       cluster_merge: a decode launch of 2-8 splits merges them in a
//                            thread-block cluster (else through the workspace and a ticket)
template <bool kernels::PagedAttentionArgs::*Field>
bool attention_knob(const char* name) {
  static const bool on = env_switch(name, kernels::PagedAttentionArgs{}.*Field);
  return on;
}

// RIDGE_ATTN_SPLIT_MIXED=0 keeps a mixed batch's decode tokens in the general kernel.
bool attention_split_mixed() {
  static const bool on = env_switch("RIDGE_ATTN_SPLIT_MIXED", true);
  return on;
}

// RIDGE_QKV_ROPE=0 keeps RoPE and the KV store out of the q|k|v GEMV's epilogue.
bool qkv_rope_epilogue() {
  static const bool on = env_switch("RIDGE_QKV_ROPE", true);
  return on;
}

// RIDGE_LM_HEAD_GEMV=0 (A/B runs) keeps the f32 logits product in cuBLASLt whatever the tuner
// chose for the LM head's shape.
bool lm_head_gemv() {
  static const bool on = env_switch("RIDGE_LM_HEAD_GEMV", true);
  return on;
}

// RIDGE_EMBED_SUMSQ=0 (A/B runs): the embedding records no sums of squares, so the first layer's
// norm runs as a kernel of its own.
bool embedding_sums() {
  static const bool on = env_switch("RIDGE_EMBED_SUMSQ", true);
  return on;
}

// RIDGE_QKV_BLOCKS_PER_SM=n and RIDGE_QKV_RING=2|3 (A/B runs): the decode chain's q|k|v GEMV (the
// one with the RoPE + KV epilogue) in a weight ring of that depth with at most n blocks a SM
// (SkinnyArgs::blocks_per_sm, ::ring), so that decode attention's blocks, launched early behind
// it, fit beside it and issue their early loads while it streams (docs/KERNELS.md, "Run 40": at
// batch 1 two ring blocks leave an attention block neither the registers nor the carveout).
// 0: as without them.
int qkv_blocks_per_sm() {
  static const int n = std::max(0, env_int("RIDGE_QKV_BLOCKS_PER_SM", 0));
  return n;
}
int qkv_ring() {
  static const int depth = [] {
    const int n = env_int("RIDGE_QKV_RING", 0);
    return n == 2 || n == 3 ? n : 0;
  }();
  return depth;
}

// RIDGE_ATTN_DECODE_STAGES=2..4 forces the decode attention kernel's ring depth (A/B runs).
int attention_decode_stages() {
  static const int stages = [] {
    const int n = env_int("RIDGE_ATTN_DECODE_STAGES", 0);
    return n >= 2 && n <= 4 ? n : 0;
  }();
  return stages;
}

// MatmulFusion::early_weights at up to kFusedMaxTokens tokens: how many steps per warp the o
// projection stages in shared memory while decode attention runs (SkinnyArgs::stage_steps).
// In the decode chain (one carveout of 132 KB) 1, so that two GEMV blocks fit beside an attention
// block; without it 3 (a block then streams its whole 4096-wide tile early). H200, run 13: the
// batch-1 step 3.944-3.948 ms (chain, 1) / 3.955 (chain at 44 %, 0); 3.97-3.99 (no chain, 3)
// against 4.03 (no chain, plain). RIDGE_EARLY_WEIGHTS=-1 (plain launch), 0 (PDL only) or 1..6 for A/B runs.
int early_weight_steps(bool decode_chain) {
  static const int forced = [] {
    const int n = env_int("RIDGE_EARLY_WEIGHTS", INT_MIN);
    return n == INT_MIN ? -2 : std::clamp(n, -1, kernels::skinny_max_stage_steps);
  }();
  return forced != -2 ? forced : decode_chain ? 1 : 3;
}

// The decode chain's carveout: RIDGE_DECODE_CARVEOUT=0..100, or -1 for none (the chain then
// launches its GEMVs plainly, as before run 13); A/B runs.
int decode_carveout(int fallback) {
  static const int percent = std::clamp(env_int("RIDGE_DECODE_CARVEOUT", fallback), -1, 100);
  return percent;
}

// PagedAttentionArgs::min_split_positions: 256 (H200, run 13: batch 1 at 2048 positions 4.466 ms
// a step against 4.618 with an even share of the 17 graph splits, i.e. 8 splits of 256; at 128-256
// positions 3.974 against 3.966, noise). RIDGE_ATTN_MIN_SPLIT=positions for A/B runs (0: even).
int attention_min_split() {
  static const int positions = std::max(0, env_int("RIDGE_ATTN_MIN_SPLIT", 256));
  return positions;
}

// PagedAttentionArgs::cluster_min_split_positions: 64, one tile a split, where the splits merge
// in a cluster (distributed shared memory, no global round trips). RIDGE_ATTN_CLUSTER_MIN_SPLIT=
// positions for A/B runs.
int attention_cluster_min_split() {
  static const int positions =
      std::max(0, env_int("RIDGE_ATTN_CLUSTER_MIN_SPLIT",
                          kernels::PagedAttentionArgs{}.cluster_min_split_positions));
  return positions;
}

// The attention split's block target, in blocks per SM (graph splits and planned launches): 2,
// one wave of the decode kernel at hd 128 (2 resident blocks per SM: 87 KB with 64 rows, 102 KB
// with 128). Was 4 (two waves) until run 19, which measured 2 against 4 on the H200 (ms a step,
// bench/results/e2e-2026-12-04-run19/c3-blocks-per-sm): batch 1 at 1,024 / 2,048 / 4,096
// positions 4.179 / 4.356 / 4.628 against 4.283 / 4.427 / 4.763, batch 4 at 1,024 4.719 against
// 4.768, batch 16 at 4,096 12.743 against 12.916. At 4,096 positions the fewer, longer splits
// stream better in one wave; why 1,024-2,048 gain, where the 256-position minimum leaves the same
// active splits, is open (empty splits leaving before the PDL wait changed nothing, c5).
// RIDGE_ATTN_BLOCKS_PER_SM=N for A/B runs.
int attention_blocks_per_sm() {
  static const int n =
      std::clamp(env_int("RIDGE_ATTN_BLOCKS_PER_SM", kernels::kAttentionBlocksPerSm), 1, 64);
  return n;
}

// The persistent batch-1 decode kernel (Backend::decode_layers; BackendOptions::decode_kernel,
// --decode-kernel, opt-in): RIDGE_DECODE_KERNEL=N sets the largest context capacity (block-table width
// × block size of the step, a graph's capacity) it runs at, 0 never (A/B runs). Default:
// kDecodeKernelPositions.
int64_t decode_kernel_positions(int64_t fallback) {
  static const int64_t positions = [fallback] {
    const char* v = std::getenv("RIDGE_DECODE_KERNEL");
    if (!v || !*v) return fallback;
    return int64_t(std::max(0, std::atoi(v)));
  }();
  return positions;
}

constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;    // cuBLASLt's advice for Hopper
constexpr size_t kAttentionWorkspaceBytes = size_t(64) << 20; // split-KV partials
constexpr size_t kSplitCounterBytes = size_t(1) << 20;        // 262144 (sequence, KV head) tickets
constexpr size_t kUploadChunkBytes = size_t(64) << 20;        // staging for weight conversion

void expect(bool ok, const char* op, const std::string& what) {
  if (!ok) fail("cuda backend {}: {}", op, what);
}

// A 2-D device tensor of `dtype` with contiguous rows (any row stride).
void expect_2d(const Tensor& t, DType dtype, const char* op, const char* name) {
  expect(t.device == Device::cuda && t.dtype == dtype && t.ndim == 2 && t.stride[1] == 1 &&
             t.stride[0] >= t.shape[1] && t.data,
         op,
         fmt::format("{} must be a 2-D {} device tensor with contiguous rows, got {}{}", name,
                     dtype_name(dtype), t.describe(),
                     t.device == Device::cuda ? "" : " on the host"));
}

void expect_i32(const Tensor& t, int64_t n, const char* op, const char* name) {
  expect(t.device == Device::cuda && t.dtype == DType::i32 && t.numel() == n &&
             (n == 0 || t.data),
         op, fmt::format("{} must be {} device i32 values, got {}", name, n, t.describe()));
}

void expect_vector(const Tensor& t, int64_t n, const char* op, const char* name) {
  expect(t.device == Device::cuda && (t.dtype == DType::f32 || t.dtype == DType::bf16) &&
             t.numel() == n && t.is_contiguous(),
         op,
         fmt::format("{} must be {} device f32 or bf16 values (from upload_weight), got {}", name,
                     n, t.describe()));
}

uint16_t* bf16(const Tensor& t) { return static_cast<uint16_t*>(t.data); }

// 16-byte aligned: what the vectorized kernels (skinny GEMM, decode kernel) need of a pointer.
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

CudaBackend::CudaBackend(int device, const BackendOptions& options)
    : device_(device), options_(options) {
  RIDGE_CHECK_CUDA(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  RIDGE_CHECK_CUDA(cudaGetDeviceProperties(&prop, device_));
  sm_count_ = prop.multiProcessorCount;
  name_ = fmt::format("cuda ({}, {} SMs, sm_{}{}, {:.0f} GiB)", prop.name, sm_count_, prop.major,
                      prop.minor, double(prop.totalGlobalMem) / double(1ull << 30));
  stream_ = std::make_unique<cuda::OwnedStream>();
  lt_ = std::make_unique<cuda::CublasLtHandle>();
  matmul_ = std::make_unique<cuda::LtMatmul>(lt_->get());
  kernels::init_paged_attention();
  kernels::pdl::set_enabled(options_.pdl);
  const FuseList fuse = parse_fuse_list(options_.fuse);
  fuse_norm_ = fuse.norm;
  fuse_silu_ = fuse.silu;
  fuse_rope_kv_ = fuse.rope_kv;
  fuse_swiglu_gemm_ = fuse.swiglu_gemm;
  // RIDGE_FP8_SCALE_KERNEL=1: fp8 products scaled by ridge's kernel even where cuBLASLt takes
  // per-row scales (tests of that path, A/B runs).
  if (const char* e = std::getenv("RIDGE_FP8_SCALE_KERNEL"); e && e[0] == '1')
    fp8_force_scale_kernel_ = true;
  // fp8 matmuls of 1-4 tokens go through kernels::gemv_fp8 rather than cuBLASLt: on the H200
  // (run 24) Llama-2-7B's batch-1 decode step took 2.987 ms with it against 4.453 ms with
  // cuBLASLt's fp8 GEMM. RIDGE_FP8_GEMV=0 turns it off (A/B runs, tests of the other path).
  if (const char* e = std::getenv("RIDGE_FP8_GEMV"); e && e[0] == '0') fp8_gemv_ = false;
  // The GEMV's own norm prologue and SwiGLU pairing (bit for bit the composed kernels' result;
  // RIDGE_FP8_FUSE=0 composes them, for A/B runs and the tests' reference).
  if (const char* e = std::getenv("RIDGE_FP8_FUSE"); e && e[0] == '0') fp8_fuse_ = false;
  // RIDGE_GEMV_WARP=1: the warp-row GEMV for every one-token GEMV, as --gemv-warp (A/B runs);
  // =0: not even a tuner candidate (cuda_tune.cpp).
  if (const char* e = std::getenv("RIDGE_GEMV_WARP"); e && e[0] == '1') options_.gemv_warp = true;
  workspace_for(stream_->get());
}

std::optional<PowerReading> CudaBackend::power_reading() const {
  // NVML opens on the first reading (only a server or a benchmark asks), not in every start-up.
  std::call_once(nvml_once_, [this] {
    char bus_id[32] = {};
    std::string why = "no PCI bus id";
    if (cudaDeviceGetPCIBusId(bus_id, int(sizeof bus_id), device_) == cudaSuccess)
      nvml_ = cuda::NvmlPower::open(bus_id, &why);
    if (!nvml_) log::debug("cuda: no power readings ({})", why);
  });
  return nvml_ ? nvml_->read() : std::nullopt;
}

CudaBackend::~CudaBackend() {
  log_decode_trace();
  // Work still queued may use the weights and workspaces freed below.
  if (stream_) (void)cudaStreamSynchronize(stream_->get());
  (void)cudaDeviceSynchronize();
}

cudaStream_t CudaBackend::stream_of(const Stream& s) const {
  return s.handle ? static_cast<cudaStream_t>(s.handle) : stream_->get();
}

CudaBackend::Workspace& CudaBackend::workspace_for(cudaStream_t stream) {
  std::lock_guard lock(workspace_mutex_);
  auto& w = workspaces_[stream];
  if (!w) {
    w = std::make_unique<Workspace>();
    w->cublas = cuda::DeviceMemory(kCublasWorkspaceBytes);
    w->attention = cuda::DeviceMemory(kAttentionWorkspaceBytes);
    w->split_counters = cuda::DeviceMemory(kSplitCounterBytes);
    w->sumsq = cuda::DeviceMemory(size_t(MatmulFusion::kSumsqTags * kSumsqFloats) * sizeof(float));
    if (fp8_tokens_ > 0) {
      w->fp8_x = cuda::DeviceMemory(size_t(fp8_tokens_ * fp8_max_cols_));
      w->fp8_scales = cuda::DeviceMemory(size_t(fp8_tokens_) * sizeof(float));
      w->fp8_product = cuda::DeviceMemory(kFp8ProductBytes);
    }
    // Zeroed on this stream and waited for: the ticket scheme never repairs a counter that starts
    // non-zero, and a plain cudaMemset (legacy stream) is not ordered before a non-blocking one.
    RIDGE_CHECK_CUDA(cudaMemsetAsync(w->split_counters.data(), 0, kSplitCounterBytes, stream));
    const size_t stream_gemm_bytes = kernels::gemm_bf16_stream_workspace_bytes();
    w->stream_gemm = cuda::DeviceMemory(stream_gemm_bytes);
    RIDGE_CHECK_CUDA(cudaMemsetAsync(w->stream_gemm.data(), 0, stream_gemm_bytes, stream));
    if (options_.gemv_stream) {  // the row-stream GEMV's row sums and zeroed tickets
      w->gemv_stream = cuda::DeviceMemory(kernels::skinny_stream_workspace_bytes(kGemvStreamRows));
      RIDGE_CHECK_CUDA(cudaMemsetAsync(w->gemv_stream.data(), 0, w->gemv_stream.size(), stream));
    }
    if (window_gemm_bytes_ > 0) {  // the window GEMV's tickets and partial sums (zeroed)
      w->window_gemm = cuda::DeviceMemory(window_gemm_bytes_);
      RIDGE_CHECK_CUDA(cudaMemsetAsync(w->window_gemm.data(), 0, window_gemm_bytes_, stream));
    }
    RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));
    log::debug(
        "cuda workspace for a stream: {} (cuBLASLt {}, attention {}, split tickets {}, "
        "weight-stream GEMM {}, row-stream GEMV {}, window GEMV {}, sums of squares {})",
        log::format_bytes(double(w->bytes())), log::format_bytes(double(kCublasWorkspaceBytes)),
        log::format_bytes(double(kAttentionWorkspaceBytes)),
        log::format_bytes(double(kSplitCounterBytes)), log::format_bytes(double(stream_gemm_bytes)),
        log::format_bytes(double(w->gemv_stream.size())),
        log::format_bytes(double(w->window_gemm.size())),
        log::format_bytes(double(w->sumsq.size())));
  }
  return *w;
}

void CudaBackend::reserve_window_gemm(size_t bytes) {
  std::lock_guard lock(workspace_mutex_);
  if (bytes <= window_gemm_bytes_) return;
  window_gemm_bytes_ = bytes;
  for (auto& [stream, w] : workspaces_) {
    if (w->window_gemm.size() > 0) {
      // Work queued on the stream may still use the old buffer; graphs may hold it.
      RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));
      w->retired_buffers.push_back(std::move(w->window_gemm));
    }
    w->window_gemm = cuda::DeviceMemory(bytes);
    RIDGE_CHECK_CUDA(cudaMemsetAsync(w->window_gemm.data(), 0, bytes, stream));
    RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  log::debug("window GEMV workspace: {} a stream", log::format_bytes(double(bytes)));
}

size_t CudaBackend::workspace_bytes() const {
  std::lock_guard lock(workspace_mutex_);
  size_t total = 0;
  for (const auto& [stream, w] : workspaces_) total += w->bytes();
  return total;
}

Buffer CudaBackend::allocate(size_t bytes) {
  auto mem = std::make_shared<cuda::DeviceMemory>(bytes);
  void* p = mem->data();
  // Zeroed (KV pools, workspaces): a padding row of a decode graph reads KV slot 0 of block 0,
  // which is then finite even before any sequence wrote it. Allocation is rare (start-up, growth).
  RIDGE_CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_->get()));
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream_->get()));
  return Buffer(p, bytes, [mem](void*) mutable { mem.reset(); });
}

void CudaBackend::upload(const Stream& s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  RIDGE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(s)));
}

void CudaBackend::download(const Stream& s, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  RIDGE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(s)));
}

void CudaBackend::synchronize(const Stream& s) {
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream_of(s)));
}

void CudaBackend::upload_into(const Tensor& host, void* dst, DType target) {
  expect(host.device == Device::cpu && host.data && host.ndim >= 1 && host.is_contiguous(),
         "upload_weight", fmt::format("expected a contiguous host tensor, got {}", host.describe()));
  const int64_t n = host.numel();
  cudaStream_t stream = stream_->get();
  if (host.dtype == target) {
    RIDGE_CHECK_CUDA(
        cudaMemcpyAsync(dst, host.data, host.nbytes(), cudaMemcpyHostToDevice, stream));
  } else {
    // Copy the stored bytes in chunks of whole blocks and convert each chunk on the GPU.
    const DTypeInfo& info = dtype_info(host.dtype);
    expect(n % info.block_elems == 0, "upload_weight",
           fmt::format("{} has {} elements, not a multiple of the {}-element block",
                       host.describe(), n, info.block_elems));
    const int64_t blocks = n / info.block_elems;
    const int64_t chunk_blocks = std::max<int64_t>(1, int64_t(kUploadChunkBytes) / info.block_bytes);
    cuda::DeviceMemory staging(size_t(std::min(blocks, chunk_blocks) * info.block_bytes));
    const size_t dst_elem = target == DType::f32 ? 4 : 2;
    for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
      const int64_t nb = std::min(chunk_blocks, blocks - b0);
      RIDGE_CHECK_CUDA(cudaMemcpyAsync(staging.data(),
                                       static_cast<const char*>(host.data) + b0 * info.block_bytes,
                                       size_t(nb * info.block_bytes), cudaMemcpyHostToDevice,
                                       stream));
      kernels::convert_weight(staging.data(), host.dtype, nb * info.block_elems,
                              static_cast<char*>(dst) + b0 * info.block_elems * dst_elem, target,
                              stream);
    }
    RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));  // before the staging memory is freed
  }
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream));  // the host view may be unmapped after load
}

Tensor CudaBackend::upload_weight(const Tensor& host) {
  expect(host.ndim >= 1, "upload_weight", fmt::format("got {}", host.describe()));
  const bool vector = host.ndim == 1 && !is_quantized(host.dtype);
  const DType target = vector ? DType::f32 : DType::bf16;
  cuda::DeviceMemory dst(size_t(host.numel()) * (target == DType::f32 ? 4 : 2));
  upload_into(host, dst.data(), target);
  Tensor out = Tensor::contiguous(dst.data(), target, host.shape.data(), host.ndim, Device::cuda);
  weights_.push_back(std::move(dst));
  return out;
}

Tensor CudaBackend::upload_weight_rows(std::span<const Tensor> parts) {
  expect(!parts.empty(), "upload_weight_rows", "no parts");
  const bool vector = parts[0].ndim == 1;
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    expect(p.data && p.ndim == parts[0].ndim && (p.ndim == 1 || p.ndim == 2) &&
               (vector || p.shape[1] == parts[0].shape[1]) && !(vector && is_quantized(p.dtype)),
           "upload_weight_rows",
           fmt::format("parts must be all vectors or all matrices with one column count, got {} "
                       "and {}",
                       parts[0].describe(), p.describe()));
    rows += p.shape[0];
  }
  const DType target = vector ? DType::f32 : DType::bf16;
  const int64_t cols = vector ? 1 : parts[0].shape[1];
  const size_t esz = target == DType::f32 ? 4 : 2;
  cuda::DeviceMemory dst(size_t(rows * cols) * esz);
  int64_t row0 = 0;
  for (const Tensor& p : parts) {
    upload_into(p, static_cast<char*>(dst.data()) + size_t(row0 * cols) * esz, target);
    row0 += p.shape[0];
  }
  const int64_t shape[2] = {rows, cols};
  Tensor out = Tensor::contiguous(dst.data(), target, shape, vector ? 1 : 2, Device::cuda);
  weights_.push_back(std::move(dst));
  return out;
}

bool CudaBackend::fold_norm_weight(Tensor& w, const Tensor& norm_weight) {
  if (!fuse_norm_ || options_.gemm == "cublas") return false;
  if (!(w.device == Device::cuda && w.dtype == DType::bf16 && w.ndim == 2 && w.is_contiguous() &&
        w.shape[1] % 8 == 0 && aligned16(w.data) &&
        norm_weight.device == Device::cuda && norm_weight.dtype == DType::f32 &&
        norm_weight.numel() == w.shape[1]))
    return false;
  kernels::scale_columns_bf16(static_cast<__nv_bfloat16*>(w.data), w.shape[0], w.shape[1],
                              norm_weight.ptr<float>(), stream_->get());
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream_->get()));
  return true;
}

bool CudaBackend::quantize_weight(Tensor& w, DType dtype) {
  if (dtype != DType::fp8_e4m3) return false;
  // K % 16: fp8 operands' rows in 16-byte multiples; N % 16: the output rows likewise, for bf16
  // and f32 outputs alike (cuBLASLt's fp8 conditions on m and ldc).
  if (!(w.device == Device::cuda && w.dtype == DType::bf16 && w.ndim == 2 && w.is_contiguous() &&
        w.shape[1] >= 16 && w.shape[1] % 16 == 0 && w.shape[0] >= 16 && w.shape[0] % 16 == 0 &&
        aligned16(w.data) && !w.scales))
    return false;
  const int64_t N = w.shape[0], K = w.shape[1];
  cuda::DeviceMemory codes(size_t(N * K)), scales(size_t(N) * sizeof(float));
  kernels::quantize_rows_fp8(static_cast<const uint16_t*>(w.data), K, N, K,
                             static_cast<uint8_t*>(codes.data()),
                             static_cast<float*>(scales.data()), stream_->get());
  RIDGE_CHECK_CUDA(cudaStreamSynchronize(stream_->get()));
  // The bf16 encoding goes where this backend holds it as one allocation (upload_weight's).
  const auto old = std::find_if(weights_.begin(), weights_.end(), [&](const auto& m) {
    return m.data() == w.data && m.size() == size_t(N * K) * 2;
  });
  if (old != weights_.end()) weights_.erase(old);
  const int64_t shape[2] = {N, K};
  Tensor q = Tensor::contiguous(codes.data(), DType::fp8_e4m3, shape, 2, Device::cuda);
  q.scales = static_cast<const float*>(scales.data());
  weights_.push_back(std::move(codes));
  weights_.push_back(std::move(scales));
  w = q;
  fp8_max_cols_ = std::max(fp8_max_cols_, K);
  return true;
}

void CudaBackend::reserve_fp8_activations(Workspace& ws, int64_t tokens, int64_t cols,
                                          cudaStream_t stream) {
  const size_t need_x = size_t(tokens * cols), need_s = size_t(tokens) * sizeof(float);
  if (ws.fp8_x.size() >= need_x && ws.fp8_scales.size() >= need_s &&
      ws.fp8_product.size() >= kFp8ProductBytes)
    return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  RIDGE_CHECK_CUDA(cudaStreamIsCapturing(stream, &capturing));
  expect(capturing == cudaStreamCaptureStatusNone, "matmul",
         fmt::format("the fp8 activations of {} tokens × {} do not fit the stream's workspace "
                     "({} bytes, sized by prepare_matmuls) and the stream is being captured",
                     tokens, cols, ws.fp8_x.size()));
  // The old buffers are kept, not freed: a CUDA graph captured before this growth may still
  // read them (growth happens only when an eager call needs more than prepare_matmuls reserved).
  // At least doubling, so that a series of growing eager calls keeps O(log) buffers.
  auto grow = [&](cuda::DeviceMemory& m, size_t bytes) {
    if (m.size() >= bytes) return;
    const size_t size = std::max(bytes, 2 * m.size());
    if (m.size() > 0) ws.retired_buffers.push_back(std::move(m));
    m = cuda::DeviceMemory(size);
  };
  grow(ws.fp8_x, need_x);
  grow(ws.fp8_scales, need_s);
  grow(ws.fp8_product, kFp8ProductBytes);
}

void CudaBackend::run_gemm_fp8(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t stream,
                               bool accumulate) {
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  expect(K % 16 == 0 && x.stride[0] % 8 == 0 && aligned16(x.data) && w.scales, "matmul",
         fmt::format("fp8 weight {} needs x {} with K % 16 == 0, a row stride % 8 == 0 and "
                     "16-byte alignment",
                     w.describe(), x.describe()));
  if (T == 0) return;
  if (try_gemv_fp8(x, w, nullptr, 0.0f, /*swiglu*/ false, accumulate, out, stream)) return;
  Workspace& ws = workspace_for(stream);
  reserve_fp8_activations(ws, T, K, stream);
  auto* xq = static_cast<uint8_t*>(ws.fp8_x.data());
  auto* sx = static_cast<float*>(ws.fp8_scales.data());
  kernels::quantize_rows_fp8(static_cast<const uint16_t*>(x.data), x.stride[0], T, K, xq, sx,
                             stream);
  const auto* wq = w.ptr<uint8_t>();
  if (!fp8_force_scale_kernel_ &&
      matmul_->run_fp8(xq, sx, K, wq, w.scales, T, N, K, out.data, out.dtype, out.stride[0],
                       ws.cublas.data(), ws.cublas.size(), stream, accumulate)) {
    ++fp8_per_row_calls_;
    return;
  }
  if (!fp8_force_scale_kernel_ && !fp8_refusal_logged_.exchange(true))
    log::warn(
        "cuBLASLt takes no per-row fp8 scales for a {}x{}x{} product{} here: such products "
        "are scaled by ridge's kernel (logged once)",
        T, N, K, accumulate ? " with a residual add" : "");
  ++fp8_scale_kernel_calls_;
  // The unscaled product in fp32, then out (+)= product · sx[t] · sw[n], in row chunks that fit
  // the stream's product buffer.
  expect(size_t(N) * 4 <= ws.fp8_product.size(), "matmul",
         fmt::format("fp8 weight {}: a row of {} fp32 products exceeds the {}-byte product buffer",
                     w.describe(), N, ws.fp8_product.size()));
  const int64_t rows = int64_t(ws.fp8_product.size() / (size_t(N) * 4));
  auto* raw = static_cast<float*>(ws.fp8_product.data());
  for (int64_t t0 = 0; t0 < T; t0 += rows) {
    const int64_t n = std::min(rows, T - t0);
    matmul_->run_fp8(xq + t0 * K, nullptr, K, wq, nullptr, n, N, K, raw, DType::f32, N,
                     ws.cublas.data(), ws.cublas.size(), stream, false);
    kernels::scale_fp8_product(raw, N, n, N, sx + t0, w.scales,
                               static_cast<char*>(out.data) +
                                   size_t(t0 * out.stride[0]) * (out.dtype == DType::f32 ? 4 : 2),
                               out.dtype, out.stride[0], accumulate, stream);
  }
}

bool CudaBackend::try_gemv_fp8(const Tensor& x, const Tensor& w, const Tensor* norm, float eps,
                               bool swiglu, bool accumulate, Tensor& out, cudaStream_t stream) {
  const int64_t T = x.shape[0], K = w.shape[1], N = w.shape[0];
  if (!fp8_gemv_ || fp8_force_scale_kernel_ || ((norm || swiglu) && !fp8_fuse_) ||
      w.dtype != DType::fp8_e4m3 || !w.scales || T < 1 || T > kernels::kGemvFp8MaxTokens ||
      K % 16 != 0 || K > kernels::kGemvFp8MaxK || x.dtype != DType::bf16 || x.stride[0] % 8 != 0 ||
      !aligned16(x.data) || !aligned16(w.data) ||
      (norm &&
       (!aligned16(norm->data) || (norm->dtype != DType::f32 && norm->dtype != DType::bf16))) ||
      (swiglu && (out.dtype != DType::bf16 || accumulate || N % 2 != 0)))
    return false;
  Workspace& ws = workspace_for(stream);
  reserve_fp8_activations(ws, T, K, stream);
  kernels::GemvFp8Args a;
  a.xq = static_cast<uint8_t*>(ws.fp8_x.data());
  a.sx = static_cast<float*>(ws.fp8_scales.data());
  a.X = x.data;
  a.ld_x = x.stride[0];
  if (norm) {
    a.prologue = kernels::GemvFp8Prologue::rmsnorm;
    a.norm_w = norm->data;
    a.norm_w_f32 = norm->dtype == DType::f32;
    a.eps = eps;
  }
  a.W = w.ptr<uint8_t>();
  a.sw = w.scales;
  a.Y = out.data;
  a.y_f32 = out.dtype == DType::f32;
  a.ld_y = out.stride[0];
  a.accumulate = accumulate;
  a.swiglu = swiglu;
  a.T = int(T), a.N = int(N), a.K = int(K);
  a.pdl = decode_chain_;  // on the decode chain the GEMV's first weights load during the prep
  kernels::gemv_fp8(a, stream);
  ++fp8_gemv_calls_;
  return true;
}

Buffer CudaBackend::allocate_host(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cudaMallocHost of {} bytes failed: {}", bytes, cudaGetErrorString(err));
  }
  return Buffer(p, bytes, [](void* q) { (void)cudaFreeHost(q); });
}

namespace {
class CudaGraph final : public Graph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t home) : exec_(exec), home_(home) {}
  ~CudaGraph() override { (void)cudaGraphExecDestroy(exec_); }
  void replay(const Stream& s) override {
    RIDGE_CHECK_CUDA(cudaGraphLaunch(exec_, s.handle ? static_cast<cudaStream_t>(s.handle) : home_));
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t home_;
};
}  // namespace

std::unique_ptr<Graph> CudaBackend::capture(const Stream& s,
                                            const std::function<void(const Stream&)>& body) {
  if (!options_.cuda_graphs) return nullptr;
  cudaStream_t stream = stream_of(s);
  workspace_for(stream);  // allocated before capture: nothing may be allocated inside
  RIDGE_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    body(Stream{stream});
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  RIDGE_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  RIDGE_CHECK_CUDA(err);
  ++graphs_captured_;
  return std::make_unique<CudaGraph>(exec, stream_->get());
}

void CudaBackend::begin_forward(int64_t tokens, int64_t max_context) {
  const int carveout = decode_carveout(kDecodeCarveout);
  decode_chain_ = tokens >= 1 && tokens <= kDecodeChainTokens &&
                  tokens * std::max<int64_t>(max_context, 1) <= kDecodeChainPositions &&
                  carveout >= 0 && options_.pdl;
  kernels::pdl::set_launch_carveout(decode_chain_ ? carveout : -1);
}

void CudaBackend::embedding(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out) {
  embedding_sumsq(s, table, ids, out, 0);
}

// With a tag: the sums of squares (one part a 256-column block of the kernel) at up to
// kFusedMaxTokens rows, where the skinny GEMV's rms_sumsq prologue can read them, so that the first
// layer's norm kernel goes. Measured level on an H100's batch-1 step: that kernel's ~9 µs in run
// 45's trace was mostly its reads waiting behind the q|k|v GEMV's early weights, which the
// embedding's read now waits behind instead (docs/KERNELS.md, "Run 46").
void CudaBackend::embedding_sumsq(const Stream& s, const Tensor& table, const Tensor& ids,
                                  Tensor& out, int record_sumsq) {
  expect_2d(out, DType::bf16, "embedding", "out");
  expect_2d(table, DType::bf16, "embedding", "table");
  expect(table.shape[1] == out.shape[1] && table.stride[0] == table.shape[1], "embedding",
         fmt::format("table {} (contiguous, from upload_weight) does not match out {}",
                     table.describe(), out.describe()));
  expect_i32(ids, out.shape[0], "embedding", "ids");
  expect(record_sumsq >= 0 && record_sumsq <= MatmulFusion::kSumsqTags, "embedding",
         "sums-of-squares tags are 0 (none), 1 and 2");
  cudaStream_t stream = stream_of(s);
  const int64_t T = out.shape[0], H = out.shape[1];
  float* sumsq = nullptr;
  if (record_sumsq) {
    Workspace& ws = workspace_for(stream);
    using Record = Workspace::SumsqRecord;
    Record& r = ws.sumsq_records[record_sumsq - 1];
    r = Record{};
    const int64_t parts = kernels::embedding_sumsq_parts(H);
    if (fuse_norm_ && embedding_sums() && T >= 1 && T <= kFusedMaxTokens && out.stride[0] == H &&
        parts * T <= kSumsqFloats) {
      sumsq = static_cast<float*>(ws.sumsq.data()) + (record_sumsq - 1) * kSumsqFloats;
      r = Record{out.data, T, H, parts};
    }
  }
  kernels::embedding_bf16(bf16(table), table.shape[0], table.shape[1], ids.ptr<int32_t>(), T,
                          bf16(out), out.stride[0], stream, sumsq);
}

void CudaBackend::rmsnorm(const Stream& s, const Tensor& x, const Tensor& weight, float eps,
                          Tensor& out) {
  expect_2d(x, DType::bf16, "rmsnorm", "x");
  expect_2d(out, DType::bf16, "rmsnorm", "out");
  expect(out.shape == x.shape, "rmsnorm",
         fmt::format("x {} does not match out {}", x.describe(), out.describe()));
  expect_vector(weight, x.shape[1], "rmsnorm", "weight");
  kernels::rmsnorm_bf16(bf16(x), x.stride[0], weight.data, weight.dtype, x.shape[0], x.shape[1],
                        eps, bf16(out), out.stride[0], stream_of(s));
}

void CudaBackend::add_rmsnorm(const Stream& s, Tensor& residual, const Tensor& x,
                              const Tensor& weight, float eps, Tensor& out) {
  expect_2d(residual, DType::bf16, "add_rmsnorm", "residual");
  expect_2d(x, DType::bf16, "add_rmsnorm", "x");
  expect_2d(out, DType::bf16, "add_rmsnorm", "out");
  expect(residual.shape == x.shape && out.shape == x.shape, "add_rmsnorm",
         fmt::format("residual {}, x {}, out {}", residual.describe(), x.describe(),
                     out.describe()));
  expect_vector(weight, x.shape[1], "add_rmsnorm", "weight");
  kernels::add_rmsnorm_bf16(bf16(residual), residual.stride[0], bf16(x), x.stride[0], weight.data,
                            weight.dtype, x.shape[0], x.shape[1], eps, bf16(out), out.stride[0],
                            stream_of(s));
}

bool CudaBackend::ridge_gemm_applies(const Tensor& x, const Tensor& w, const Tensor& out) const {
  const int64_t K = x.shape[1], N = w.shape[0];
  return out.dtype == DType::bf16 && w.dtype == DType::bf16 && x.stride[0] == K &&
         out.stride[0] == N && K % 8 == 0 && N % 8 == 0 && N <= 65535 * 16 && aligned16(x.data) &&
         aligned16(w.data) && aligned16(out.data);
}

CudaBackend::GemmKernel CudaBackend::choose_gemm(int64_t T, int64_t N, int64_t K) const {
  if (options_.gemm == "cublas") return GemmKernel::cublas;
  if (options_.gemm == "ridge") return T <= 32 ? GemmKernel::skinny : GemmKernel::sm90;
  {
    std::lock_guard lock(gemm_mutex_);
    auto it = gemm_choice_.find(GemmKey{token_bucket(T), N, K});
    if (it != gemm_choice_.end()) return it->second;
  }
  // Untuned: the by-shape rule from the H200 ladder (docs/KERNELS.md): the weight-streaming
  // kernel wins at one to eight tokens on the square and down projections; cuBLASLt elsewhere.
  return T <= 8 && N * K <= (int64_t(64) << 20) ? GemmKernel::skinny : GemmKernel::cublas;
}

int64_t CudaBackend::token_bucket(int64_t T) {
  int64_t b = 1;
  while (b < T) b *= 2;
  return b;
}

void CudaBackend::run_gemm(GemmKernel kernel, const Tensor& x, const Tensor& w, Tensor& out,
                           cudaStream_t stream, bool accumulate) {
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  using kb = __nv_bfloat16;
  const auto* residual = accumulate ? static_cast<const kb*>(out.data) : nullptr;
  switch (kernel) {
    case GemmKernel::skinny:
      kernels::gemm_bf16_skinny(static_cast<const kb*>(x.data), static_cast<const kb*>(w.data),
                                static_cast<kb*>(out.data), int(T), int(N), int(K), stream,
                                residual);
      return;
    case GemmKernel::skinny_rows:
      kernels::gemm_bf16_skinny_rows(static_cast<const kb*>(x.data),
                                     static_cast<const kb*>(w.data), static_cast<kb*>(out.data),
                                     int(T), int(N), int(K), stream, residual);
      return;
    case GemmKernel::sm90:
      kernels::gemm_bf16_sm90(static_cast<const kb*>(x.data), static_cast<const kb*>(w.data),
                              static_cast<kb*>(out.data), int(T), int(N), int(K), stream,
                              residual);
      return;
    case GemmKernel::stream: {
      Workspace& ws = workspace_for(stream);
      kernels::gemm_bf16_stream(static_cast<const kb*>(x.data), static_cast<const kb*>(w.data),
                                static_cast<kb*>(out.data), int(T), int(N), int(K), stream,
                                ws.stream_gemm.data(), ws.stream_gemm.size(), residual);
      return;
    }
    case GemmKernel::window: {
      // The workspace tune_gemms reserved for the shapes it measured (a shape past it is refused
      // by the kernel's check: a tuner candidate that throws is skipped).
      Workspace& ws = workspace_for(stream);
      kernels::gemm_bf16_window(static_cast<const kb*>(x.data), static_cast<const kb*>(w.data),
                                static_cast<kb*>(out.data), int(T), int(N), int(K), stream,
                                ws.window_gemm.data(), ws.window_gemm.size(), residual,
                                /*seg*/ 0, /*pdl*/ kernels::pdl::enabled(), window_loader());
      return;
    }
    case GemmKernel::warp_rows:
      if (T == 1) {  // (a choice made for one token only; anything else takes the skinny kernel)
        kernels::gemv_bf16_warp_rows(static_cast<const kb*>(x.data), static_cast<const kb*>(w.data),
                                     static_cast<kb*>(out.data), int(N), int(K), stream, residual,
                                     kernels::pdl::enabled());
        return;
      }
      run_gemm(GemmKernel::skinny, x, w, out, stream, accumulate);
      return;
    case GemmKernel::cublas:
    case GemmKernel::cublas_2:
    case GemmKernel::cublas_3:
    case GemmKernel::cublas_4: {
      Workspace& ws = workspace_for(stream);
      matmul_->run(bf16(x), x.stride[0], bf16(w), T, N, K, out.data, out.dtype, out.stride[0],
                   ws.cublas.data(), ws.cublas.size(), stream, accumulate, cublas_algo(kernel));
      return;
    }
  }
}

void CudaBackend::check_matmul(const char* op, const Tensor& x, const Tensor& w,
                               const Tensor& out, int64_t x_cols) const {
  expect_2d(x, DType::bf16, op, "x");
  expect(out.dtype == DType::bf16 || out.dtype == DType::f32, op,
         fmt::format("out must be bf16 or f32, got {}", out.describe()));
  expect_2d(out, out.dtype, op, "out");
  if (w.dtype == DType::fp8_e4m3) {
    expect_2d(w, DType::fp8_e4m3, op, "w (from quantize_weight)");
    expect(w.scales != nullptr && w.stride[0] == w.shape[1], op,
           fmt::format("fp8 weight {} must be a contiguous row-scaled matrix from quantize_weight",
                       w.describe()));
  } else {
    expect_2d(w, DType::bf16, op, "w (from upload_weight)");
  }
  const int64_t T = x.shape[0], K = w.shape[1], N = w.shape[0];
  expect(x.shape[1] == x_cols && w.stride[0] == K && out.shape[0] == T && out.shape[1] == N, op,
         fmt::format("x {} · w {}ᵀ does not give out {}", x.describe(), w.describe(),
                     out.describe()));
}

void CudaBackend::matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                         Tensor& out) {
  check_matmul("matmul", x, w, out, w.shape[1]);
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (bias) expect_vector(*bias, N, "matmul", "bias");
  if (T == 0) return;
  cudaStream_t stream = stream_of(s);
  if (w.dtype == DType::fp8_e4m3) {
    run_gemm_fp8(x, w, out, stream, /*accumulate*/ false);
  } else {
    const GemmKernel kernel =
        ridge_gemm_applies(x, w, out) ? choose_gemm(T, N, K) : GemmKernel::cublas;
    run_gemm(kernel, x, w, out, stream);
  }
  if (bias)
    kernels::add_bias(out.data, out.dtype, out.stride[0], T, N, bias->data, bias->dtype, stream);
}

void CudaBackend::matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) {
  check_matmul("matmul_add", x, w, out, w.shape[1]);
  expect(out.dtype == DType::bf16, "matmul_add",
         fmt::format("out must be bf16, got {}", out.describe()));
  const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (T == 0) return;
  if (w.dtype == DType::fp8_e4m3) {
    run_gemm_fp8(x, w, out, stream_of(s), /*accumulate*/ true);
    return;
  }
  const GemmKernel kernel =
      ridge_gemm_applies(x, w, out) ? choose_gemm(T, N, K) : GemmKernel::cublas;
  run_gemm(kernel, x, w, out, stream_of(s), /*accumulate*/ true);
}

void CudaBackend::matmul_fused(const Stream& s, const Tensor& x, const Tensor& w,
                               const MatmulFusion& f, Tensor& scratch, Tensor& out) {
  expect(!(f.norm_weight && f.silu_mul), "matmul_fused", "at most one prologue");
  const int64_t K = w.shape[1];
  check_matmul("matmul_fused", x, w, out, f.silu_mul ? 2 * K : K);
  run_fused(s, x, w, f, scratch, out, /*swiglu*/ false);
}

void CudaBackend::matmul_swiglu(const Stream& s, const Tensor& x, const Tensor& w,
                                const MatmulFusion& f, Tensor& scratch, Tensor& gate_up,
                                Tensor& out) {
  expect(!f.silu_mul && !f.accumulate && !f.record_sumsq, "matmul_swiglu",
         "takes a norm prologue only (no silu_mul, accumulate or record_sumsq)");
  check_matmul("matmul_swiglu", x, w, gate_up, w.shape[1]);
  expect_2d(out, DType::bf16, "matmul_swiglu", "out");
  const int64_t T = x.shape[0], N = w.shape[0];
  expect(N % 2 == 0 && out.shape[0] == T && out.shape[1] == N / 2, "matmul_swiglu",
         fmt::format("w {} must stack gate and up rows and out {} be [T, F]", w.describe(),
                     out.describe()));
  // fp8 weights at 1-4 tokens: the GEMV with the norm prologue and gate/up paired (no [T, 2F]).
  if (f.norm_weight) expect_vector(*f.norm_weight, w.shape[1], "matmul_swiglu", "norm weight");
  if (x.shape[0] > 0 && w.dtype == DType::fp8_e4m3 &&
      try_gemv_fp8(x, w, f.norm_weight, f.eps, /*swiglu*/ true, false, out, stream_of(s)))
    return;
  // The SwiGLU epilogue (--fuse silu): the skinny kernel at up to kFusedMaxTokens, else composed.
  // (A norm prologue that cannot fuse writes the backend's scratch, aligned like x.)
  const int64_t K = w.shape[1];
  const bool bf16_w = w.dtype == DType::bf16;  // (fp8 weights: composed, cuBLASLt's fp8 GEMM)
  const bool fused = fuse_silu_ && bf16_w && options_.gemm != "cublas" && T <= kFusedMaxTokens &&
                     N % 16 == 0 && N <= 65535 * 16 && K % 8 == 0 && x.stride[0] % 8 == 0 &&
                     aligned16(x.data) && aligned16(w.data) && aligned16(out.data) &&
                     out.stride[0] == N / 2;
  // --fuse swiglu_gemm: at prefill sizes, the sm90 GEMM with its SwiGLU epilogue (no [T, 2F]
  // product written and read back); the norm prologue, if any, as the composed path runs it.
  const Tensor& gemm_in = f.norm_weight ? scratch : x;
  if (!fused && bf16_w && fuse_swiglu_gemm_ && options_.gemm != "cublas" &&
      T >= kSwigluGemmMinTokens && (N / 2) % 128 == 0 && K % 8 == 0 && gemm_in.stride[0] == K &&
      aligned16(gemm_in.data) && aligned16(w.data) && aligned16(out.data) &&
      out.stride[0] == N / 2 &&
      (!f.norm_weight || (scratch.dtype == DType::bf16 && scratch.shape == x.shape))) {
    if (f.norm_weight) rmsnorm(s, x, *f.norm_weight, f.eps, scratch);
    using kb = __nv_bfloat16;
    kernels::gemm_bf16_swiglu(static_cast<const kb*>(gemm_in.data),
                              static_cast<const kb*>(w.data), static_cast<kb*>(out.data), int(T),
                              int(N / 2), int(K), stream_of(s));
    return;
  }
  if (!fused) {
    Backend::matmul_swiglu(s, x, w, f, scratch, gate_up, out);
    return;
  }
  run_fused(s, x, w, f, scratch, out, /*swiglu*/ true);
}

void CudaBackend::run_fused(const Stream& s, const Tensor& x, const Tensor& w,
                            const MatmulFusion& f, Tensor& scratch, Tensor& out, bool swiglu,
                            const kernels::SkinnyRopeKv* rope_kv) {
  const int64_t K = w.shape[1];
  const int64_t T = x.shape[0], N = w.shape[0];
  const char* op = swiglu ? "matmul_swiglu" : "matmul_fused";
  if (f.norm_weight) expect_vector(*f.norm_weight, K, op, "norm weight");
  constexpr int kTags = MatmulFusion::kSumsqTags;
  static_assert(kTags == 2, "the message below names the tags");
  expect(f.record_sumsq >= 0 && f.record_sumsq <= kTags && f.norm_sumsq >= 0 &&
             f.norm_sumsq <= kTags,
         op, "sums-of-squares tags are 0 (none), 1 and 2");
  cudaStream_t stream = stream_of(s);
  Workspace& ws = workspace_for(stream);
  using Record = Workspace::SumsqRecord;
  // A tag asked to record is dropped first: it is set again only if this call records.
  if (f.record_sumsq) ws.sumsq_records[f.record_sumsq - 1] = Record{};
  if (T == 0) return;
  // fp8 weights at 1-4 tokens: the GEMV with the norm as its prologue.
  if (w.dtype == DType::fp8_e4m3 && !f.silu_mul && !swiglu && !rope_kv &&
      try_gemv_fp8(x, w, f.norm_weight, f.eps, /*swiglu*/ false, f.accumulate, out, stream))
    return;
  // Whether the skinny kernel's prologues and epilogues can run with `in` as X (with swiglu the
  // caller checked out).
  const auto skinny_ok = [&](const Tensor& in) {
    return options_.gemm != "cublas" && w.dtype == DType::bf16 && T <= kFusedMaxTokens &&
           (swiglu || out.stride[0] == N) && K % 8 == 0 && N % 8 == 0 && N <= 65535 * 16 &&
           in.stride[0] % 8 == 0 && aligned16(in.data) && aligned16(w.data) &&
           aligned16(out.data) && !(f.accumulate && out.dtype != DType::bf16);
  };
  const Tensor* in = &x;
  kernels::SkinnyPrologue prologue = kernels::SkinnyPrologue::none;
  const float* sumsq_in = nullptr;
  int sumsq_parts = 0;
  if (f.norm_weight) {
    // Fused only as the 1/rms scale of a folded weight (fold_norm_weight), with the sums of
    // squares of x from the call that wrote it; else the norm kernel (the in-loop sum of
    // squares measured slower than it: docs/KERNELS.md).
    const Record* r = f.norm_sumsq ? &ws.sumsq_records[f.norm_sumsq - 1] : nullptr;
    if (fuse_norm_ && f.norm_folded && r && r->out == x.data && r->rows == T && r->cols == K &&
        x.stride[0] == K && skinny_ok(x)) {
      prologue = kernels::SkinnyPrologue::rms_sumsq;
      sumsq_in = static_cast<const float*>(ws.sumsq.data()) + (f.norm_sumsq - 1) * kSumsqFloats;
      sumsq_parts = int(r->parts);
    } else {
      rmsnorm(s, x, *f.norm_weight, f.eps, scratch);
      in = &scratch;
    }
  } else if (f.silu_mul) {  // as a kernel of its own (the prologue form measured slower)
    silu_mul(s, x, scratch);
    in = &scratch;
  }
  // At one token, the warp-row GEMV where the tuner chose it for this weight shape (or
  // --gemv-warp forces it), and for SwiGLU whatever the tuner chose (swiglu_in_warp_rows): it
  // writes one part of the sums of squares a block (kernels::SkinnyArgs::warp), where it applies;
  // the MMA kernel one per 16 rows. Either reads the other's parts, so the choice can differ from
  // one shape to the next.
  const bool warp = T == 1 && (options_.gemv_warp || (swiglu && swiglu_in_warp_rows()) ||
                               choose_gemm(1, N, K) == GemmKernel::warp_rows);
  kernels::SkinnyArgs shape;
  shape.M = int(T), shape.N = int(N), shape.K = int(K), shape.warp = warp;
  const int64_t out_parts = kernels::skinny_sumsq_out_parts(shape);
  const bool record = f.record_sumsq && fuse_norm_ && out.dtype == DType::bf16 && skinny_ok(*in) &&
                      out_parts * T <= kSumsqFloats;
  // An f32 output (the LM head's logits) takes the fused kernel's plain epilogue where the tuner
  // chose one of ridge's GEMVs for the shape (cuBLASLt writes it otherwise: ridge's other kernels
  // store bf16 only). The tuner's choice is looked up for f32 outputs only.
  const bool f32_gemv = out.dtype == DType::f32 && lm_head_gemv() && !f.accumulate &&
                        skinny_ok(*in) && (warp || choose_gemm(T, N, K) == GemmKernel::skinny);
  if (!swiglu && !rope_kv && prologue == kernels::SkinnyPrologue::none && !record &&
      !f32_gemv) {  // the tuned kernel
    if (f.accumulate)
      matmul_add(s, *in, w, out);
    else
      matmul(s, *in, w, nullptr, out);
    return;
  }
  using kb = __nv_bfloat16;
  kernels::SkinnyArgs a;
  a.X = static_cast<const kb*>(in->data);
  a.ld_x = in->stride[0];
  a.W = static_cast<const kb*>(w.data);
  a.Y = out.data;
  a.y_f32 = out.dtype == DType::f32;
  a.residual = f.accumulate ? static_cast<const kb*>(out.data) : nullptr;
  a.eps = f.eps;
  a.sumsq_in = sumsq_in;
  a.sumsq_parts = sumsq_in ? sumsq_parts : 0;
  if (record)
    a.sumsq_out = static_cast<float*>(ws.sumsq.data()) + (f.record_sumsq - 1) * kSumsqFloats;
  a.swiglu = swiglu;
  // With PDL in the decode chain (begin_forward: one carveout for every kernel). Outside it,
  // plainly: a GEMV launched early beside a kernel of another carveout (decode attention's)
  // starts on SMs with that kernel's small L1 and streams ~20 % slower, ~23 us per GEMV at batch 1
  // (docs/KERNELS.md, runs 8 and 13). Behind a latency-bound kernel (f.early_weights: decode
  // attention) it also stages weights before its wait.
  const int early = f.early_weights && prologue == kernels::SkinnyPrologue::none
                        ? early_weight_steps(decode_chain_)
                        : -1;
  a.pdl_launch = early >= 0 || decode_chain_;
  a.stage_steps = std::max(early, 0);
  a.M = int(T), a.N = int(N), a.K = int(K);
  if (rope_kv) {
    a.rope = *rope_kv;
    if (decode_chain_) a.blocks_per_sm = qkv_blocks_per_sm(), a.ring = qkv_ring();
  }
  if (options_.gemv_stream)  // the row-stream GEMV where it applies (1-2 tokens)
    a.stream = kernels::skinny_stream_workspace(ws.gemv_stream.data(), kGemvStreamRows);
  a.warp = warp;
  kernels::gemm_bf16_skinny_fused(a, prologue, stream);
  if (record)
    ws.sumsq_records[f.record_sumsq - 1] =
        Record{out.data, T, N, kernels::skinny_sumsq_out_parts(a)};
}

// The one-token SwiGLU GEMV (gate|up with its SwiGLU epilogue) runs in the warp-row GEMV whatever
// the tuner chose for the shape: the tuner times the plain product alone, where the two kernels
// tie on the H100 (62.0-63.3 µs for Llama-2-7B's gate|up), while in the decode step the warp-row
// SwiGLU (one row an item, two warps an output) gains 1.0-1.9 % of the batch-1 step over the MMA
// kernel's (whose 1,376 SwiGLU tiles end in a sixth round 21 % full): three H100s, run 45 c5, c7
// and c8, docs/KERNELS.md. RIDGE_GEMV_WARP_SWIGLU=0 leaves it to the tuner (A/B runs), as does
// RIDGE_GEMV_WARP=0 (the warp-row GEMV not a candidate).
bool CudaBackend::swiglu_in_warp_rows() const {
  static const bool on = env_switch("RIDGE_GEMV_WARP_SWIGLU", true) && warp_rows_candidate();
  return on && !options_.gemv_stream && options_.gemm != "cublas";
}

std::string CudaBackend::one_token_swiglu_kernel() const {
  // Only where the SwiGLU GEMV is fused (--fuse silu): else it is a plain product and a kernel.
  return fuse_silu_ && swiglu_in_warp_rows() ? gemm_name(GemmKernel::warp_rows) : std::string();
}

const char* CudaBackend::gemm_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::skinny: return "ridge_skinny";
    case GemmKernel::skinny_rows: return "ridge_skinny_rows";
    case GemmKernel::sm90: return "ridge_sm90";
    case GemmKernel::stream: return "ridge_stream";
    case GemmKernel::window:
      return "ridge_window";
    case GemmKernel::warp_rows:
      return "ridge_warp_rows";
    case GemmKernel::cublas: return "cublaslt";
    case GemmKernel::cublas_2: return "cublaslt_2";
    case GemmKernel::cublas_3: return "cublaslt_3";
    case GemmKernel::cublas_4: return "cublaslt_4";
  }
  return "?";
}

int CudaBackend::cublas_algo(GemmKernel k) {
  switch (k) {
    case GemmKernel::cublas: return 0;
    case GemmKernel::cublas_2: return 1;
    case GemmKernel::cublas_3: return 2;
    case GemmKernel::cublas_4: return 3;
    case GemmKernel::skinny:
    case GemmKernel::skinny_rows:
    case GemmKernel::sm90:
    case GemmKernel::stream:
    case GemmKernel::window:
    case GemmKernel::warp_rows:
      return -1;
  }
  return -1;
}

void CudaBackend::prepare_matmuls(std::span<const MatmulShape> shapes, int64_t max_tokens) {
  if (fp8_max_cols_ > 0) {
    // Every stream's fp8 activation buffers for the largest step, before any graph is captured.
    {
      std::lock_guard lock(workspace_mutex_);
      fp8_tokens_ = std::max(fp8_tokens_, max_tokens);
    }
    std::vector<std::pair<cudaStream_t, Workspace*>> all;
    {
      std::lock_guard lock(workspace_mutex_);
      for (auto& [stream, w] : workspaces_) all.emplace_back(stream, w.get());
    }
    for (auto [stream, w] : all) reserve_fp8_activations(*w, fp8_tokens_, fp8_max_cols_, stream);
    // The bf16 GEMM choices are not what fp8 weights run (cuBLASLt's fp8 GEMM, its first
    // heuristic algorithm): no tuning.
    return;
  }
  if (!options_.tune || options_.gemm != "auto" || shapes.empty()) return;
  tune_gemms(shapes, max_tokens);
}

void CudaBackend::rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
                       const Tensor& inv_freq) {
  expect_2d(q, DType::bf16, "rope", "q");
  expect_2d(k, DType::bf16, "rope", "k");
  const int64_t half = inv_freq.numel(), hd = 2 * half, T = q.shape[0];
  expect(inv_freq.device == Device::cuda && inv_freq.dtype == DType::f32 && half >= 1 &&
             q.shape[1] % hd == 0 && k.shape[1] % hd == 0 && k.shape[0] == T,
         "rope",
         fmt::format("q {}, k {}, inv_freq {}", q.describe(), k.describe(), inv_freq.describe()));
  expect_i32(positions, T, "rope", "positions");
  kernels::rope_bf16(bf16(q), q.stride[0], q.shape[1] / hd, bf16(k), k.stride[0], k.shape[1] / hd,
                     hd, positions.ptr<int32_t>(), inv_freq.ptr<float>(), T, stream_of(s));
}

void CudaBackend::kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                           KvLayer& kv) {
  expect_2d(k, DType::bf16, "kv_store", "k");
  expect_2d(v, DType::bf16, "kv_store", "v");
  const bool fp8 = kv.k.dtype == DType::fp8_e4m3;
  expect(kv.k.device == Device::cuda && (kv.k.dtype == DType::bf16 || fp8) && kv.k.ndim == 4 &&
             kv.k.is_contiguous() && kv.v.dtype == kv.k.dtype && kv.v.is_contiguous() &&
             kv.v.shape == kv.k.shape,
         "kv_store",
         fmt::format("KV pools must be contiguous bf16 or fp8_e4m3 [blocks, block_size, nkv, hd] "
                     "device tensors, got {} and {}",
                     kv.k.describe(), kv.v.describe()));
  const int64_t width = kv.k.shape[2] * kv.k.shape[3];
  expect(k.shape[1] == width && v.shape == k.shape, "kv_store",
         fmt::format("k {}, v {} vs pool {}", k.describe(), v.describe(), kv.k.describe()));
  expect_i32(slots, k.shape[0], "kv_store", "slots");
  kernels::kv_store_bf16(bf16(k), k.stride[0], bf16(v), v.stride[0], slots.ptr<int32_t>(),
                         k.shape[0], width, kv.k.data, kv.v.data, kv.k.shape[0] * kv.k.shape[1],
                         fp8, stream_of(s));
}

namespace {
// The paged pools the fused RoPE + KV store kernels write: device, contiguous [blocks,
// block_size, kv_heads, hd], bf16 or E4M3, K and V alike.
bool kv_pools_ok(const KvLayer& kv, int64_t hd) {
  return kv.k.device == Device::cuda &&
         (kv.k.dtype == DType::bf16 || kv.k.dtype == DType::fp8_e4m3) && kv.k.ndim == 4 &&
         kv.k.is_contiguous() && kv.v.is_contiguous() && kv.v.device == Device::cuda &&
         kv.v.dtype == kv.k.dtype && kv.v.shape == kv.k.shape && kv.k.shape[3] == hd;
}
}  // namespace

void CudaBackend::rope_kv_store(const Stream& s, Tensor& q, Tensor& k, const Tensor& v,
                                const Tensor& positions, const Tensor& inv_freq,
                                const Tensor& slots, KvLayer& kv) {
  expect_2d(q, DType::bf16, "rope_kv_store", "q");
  expect_2d(k, DType::bf16, "rope_kv_store", "k");
  expect_2d(v, DType::bf16, "rope_kv_store", "v");
  const int64_t T = q.shape[0], hd = 2 * inv_freq.numel();
  const bool fp8 = kv.k.dtype == DType::fp8_e4m3;
  if (fuse_rope_kv_ && kv_pools_ok(kv, hd) && q.dtype == DType::bf16 && k.dtype == DType::bf16 &&
      v.dtype == DType::bf16 && q.ndim == 2 && k.ndim == 2 && v.ndim == 2 && q.stride[1] == 1 &&
      k.stride[1] == 1 && v.stride[1] == 1 && k.shape[0] == T && v.shape == k.shape &&
      k.shape[1] == kv.k.shape[2] * hd && q.shape[1] % hd == 0 &&
      inv_freq.device == Device::cuda && inv_freq.dtype == DType::f32 &&
      positions.device == Device::cuda && positions.dtype == DType::i32 &&
      positions.numel() == T && slots.device == Device::cuda && slots.dtype == DType::i32 &&
      slots.numel() == T) {
    if (T == 0) return;
    if (kernels::rope_kv_store_bf16(bf16(q), q.stride[0], q.shape[1] / hd, bf16(k), k.stride[0],
                                    k.shape[1] / hd, bf16(v), v.stride[0], hd,
                                    positions.ptr<int32_t>(), inv_freq.ptr<float>(),
                                    slots.ptr<int32_t>(), T, kv.k.data, kv.v.data,
                                    kv.k.shape[0] * kv.k.shape[1], fp8, stream_of(s)))
      return;
  }
  Backend::rope_kv_store(s, q, k, v, positions, inv_freq, slots, kv);  // checks, two kernels
}

bool CudaBackend::matmul_rope_kv(const Stream& s, const Tensor& x, const Tensor& w,
                                 const MatmulFusion& f, Tensor& scratch, Tensor& qkv,
                                 const Tensor& positions, const Tensor& inv_freq,
                                 const Tensor& slots, KvLayer& kv) {
  if (!fuse_rope_kv_ || !qkv_rope_epilogue() || options_.gemm == "cublas" || f.silu_mul ||
      f.accumulate || f.record_sumsq)
    return false;
  const int64_t T = x.shape[0], N = w.shape[0], K = w.shape[1], hd = 2 * inv_freq.numel();
  const bool fp8 = kv.k.dtype == DType::fp8_e4m3;
  if (!kv_pools_ok(kv, hd) || hd % 16 != 0) return false;
  const int64_t kv_dim = kv.k.shape[2] * hd, q_dim = N - 2 * kv_dim;
  // The norm, where it is not the fused 1/rms scale, writes scratch, which the kernel then reads.
  const bool in_ok = aligned16(x.data) && x.stride[0] % 8 == 0 &&
                     (!f.norm_weight || (aligned16(scratch.data) && scratch.stride[0] % 8 == 0));
  if (!(T >= 1 && T <= kFusedMaxTokens && q_dim > 0 && q_dim % hd == 0 && K % 8 == 0 &&
        N <= 65535 * 16 && in_ok && aligned16(w.data) && x.dtype == DType::bf16 &&
        w.dtype == DType::bf16 && qkv.dtype == DType::bf16 && qkv.ndim == 2 &&
        qkv.shape[0] == T && qkv.shape[1] == N && qkv.stride[0] == N && aligned16(qkv.data) &&
        positions.device == Device::cuda && positions.dtype == DType::i32 &&
        positions.numel() == T && slots.device == Device::cuda && slots.dtype == DType::i32 &&
        slots.numel() == T && inv_freq.device == Device::cuda && inv_freq.dtype == DType::f32))
    return false;
  check_matmul("matmul_rope_kv", x, w, qkv, K);
  kernels::SkinnyRopeKv r;
  r.positions = positions.ptr<int32_t>();
  r.inv_freq = inv_freq.ptr<float>();
  r.slots = slots.ptr<int32_t>();
  r.k_pool = kv.k.data;
  r.v_pool = kv.v.data;
  r.num_slots = kv.k.shape[0] * kv.k.shape[1];
  r.kv_fp8 = fp8;
  r.q_dim = int(q_dim), r.kv_dim = int(kv_dim), r.head_dim = int(hd);
  run_fused(s, x, w, f, scratch, qkv, /*swiglu*/ false, &r);
  return true;
}

namespace {
// Sequences at the head of a planned call that the decode kernel can take (q_len * group <= 16,
// a block size it takes: kernels::decode_block_size_ok), from the host mirrors.
int32_t leading_decodes(const kernels::PagedAttentionArgs& a) {
  if (!kernels::decode_block_size_ok(a.block_size) || a.num_kv_heads <= 0) return 0;
  const int group = a.num_q_heads / a.num_kv_heads;
  int32_t n = 0;
  while (n < a.num_seqs &&
         (a.host_cu_seqlens_q[n + 1] - a.host_cu_seqlens_q[n]) * group <= 16 &&
         a.host_cu_seqlens_q[n + 1] > a.host_cu_seqlens_q[n])
    ++n;
  return n;
}
}  // namespace

void CudaBackend::attention(const Stream& s, const Tensor& q, const KvLayer& kv,
                            const AttentionMeta& meta, float scale, Tensor& out) {
  expect_2d(q, DType::bf16, "attention", "q");
  expect_2d(out, DType::bf16, "attention", "out");
  // fp8 (E4M3) pools: both attention kernels read them.
  const bool fp8 = kv.k.dtype == DType::fp8_e4m3;
  expect(kv.k.device == Device::cuda && (kv.k.dtype == DType::bf16 || fp8) && kv.k.ndim == 4 &&
             kv.k.is_contiguous() && kv.v.dtype == kv.k.dtype && kv.v.is_contiguous() &&
             kv.v.shape == kv.k.shape,
         "attention",
         fmt::format("KV pools must be contiguous bf16 or fp8_e4m3 device tensors, got {} and {}",
                     kv.k.describe(), kv.v.describe()));
  const int64_t nkv = kv.k.shape[2], hd = kv.k.shape[3];
  expect(q.shape[1] % hd == 0 && out.shape == q.shape, "attention",
         fmt::format("q {}, pool {}, out {}", q.describe(), kv.k.describe(), out.describe()));
  expect(meta.host_cu_seqlens_q && meta.host_context_lens && meta.num_seqs >= 0, "attention",
         "AttentionMeta needs the host mirrors of cu_seqlens_q and context_lens for planning");
  expect_i32(meta.cu_seqlens_q, meta.num_seqs + 1, "attention", "cu_seqlens_q");
  expect_i32(meta.context_lens, meta.num_seqs, "attention", "context_lens");
  expect_i32(meta.block_tables, int64_t(meta.num_seqs) * meta.max_blocks_per_seq, "attention",
             "block_tables");
  const int32_t* cu = meta.host_cu_seqlens_q;
  expect(meta.num_seqs == 0 || (cu[0] == 0 && cu[meta.num_seqs] <= q.shape[0]), "attention",
         fmt::format("cu_seqlens_q must start at 0 and end within q's {} rows", q.shape[0]));
  kernels::PagedAttentionArgs a;
  a.q = bf16(q);
  a.ld_q = q.stride[0];
  a.out = bf16(out);
  a.ld_out = out.stride[0];
  a.k_pool = static_cast<const uint16_t*>(kv.k.data);
  a.v_pool = static_cast<const uint16_t*>(kv.v.data);
  a.kv_fp8 = fp8;
  a.num_blocks = kv.k.shape[0];
  a.block_size = int(kv.k.shape[1]);
  a.num_kv_heads = int(nkv);
  a.num_q_heads = int(q.shape[1] / hd);
  a.head_dim = int(hd);
  a.cu_seqlens_q = meta.cu_seqlens_q.ptr<int32_t>();
  a.context_lens = meta.context_lens.ptr<int32_t>();
  a.block_tables = meta.block_tables.ptr<int32_t>();
  a.max_blocks_per_seq = meta.max_blocks_per_seq;
  a.num_seqs = meta.num_seqs;
  a.scale = scale;
  a.host_cu_seqlens_q = meta.host_cu_seqlens_q;
  a.host_context_lens = meta.host_context_lens;
  a.general_block_rows = attention_block_rows();
  using PA = kernels::PagedAttentionArgs;
  a.early_kv = attention_knob<&PA::early_kv>("RIDGE_ATTN_EARLY_KV");
  a.decode_fill_ring = attention_knob<&PA::decode_fill_ring>("RIDGE_ATTN_FILL_RING");
  a.decode_skip_empty = attention_knob<&PA::decode_skip_empty>("RIDGE_ATTN_SKIP_EMPTY");
  a.cluster_merge = attention_knob<&PA::cluster_merge>("RIDGE_ATTN_CLUSTER");
  a.min_split_positions = attention_min_split();
  a.cluster_min_split_positions = attention_cluster_min_split();
  if (attention_decode_stages()) a.decode_stages = attention_decode_stages();
  cudaStream_t stream = stream_of(s);
  Workspace& ws = workspace_for(stream);
  a.split_counters = static_cast<int*>(ws.split_counters.data());
  a.split_counters_len = int64_t(ws.split_counters.size() / sizeof(int));
  if (meta.fixed_splits != 0) {
    // Graph mode: nothing launched depends on the host mirrors.
    a.max_q_len = std::max(1, meta.max_q_len);
    a.fixed_splits =
        meta.fixed_splits > 0
            ? meta.fixed_splits
            : kernels::graph_attention_splits(
                  meta.num_seqs, a.max_q_len, a.num_kv_heads, a.num_q_heads / a.num_kv_heads,
                  a.head_dim, meta.max_blocks_per_seq * a.block_size, sm_count_,
                  ws.attention.size(), attention_blocks_per_sm());
  }
  const int target = attention_blocks_per_sm() * sm_count_;
  // A mixed batch (the scheduler puts decodes first, then prefill chunks): its leading decode
  // tokens go to the decode kernel and the rest to the general one, two launches over disjoint
  // sequences (the pointers offset; token rows stay absolute), when the decodes alone fill the GPU
  // with (sequence, KV head) blocks. In one general launch a decode token uses 1 row of a 64- or
  // 128-row block (group 1) with one warp computing: 15% slower at 512 x 192 positions on the
  // H200 with 64-row blocks, +2.5% offline serving throughput (bench/results/e2e-2026-12-03-run9:
  // a1-attention/a1.log, s2-serve-split against s2a-serve-nosplit).
  const int32_t decodes = meta.fixed_splits == 0 && attention_split_mixed() ? leading_decodes(a) : 0;
  if (decodes > 0 && decodes < a.num_seqs && int64_t(decodes) * a.num_kv_heads >= sm_count_) {
    kernels::PagedAttentionArgs d = a, g = a;
    d.num_seqs = decodes;
    d.path = kernels::AttentionPath::decode;
    g.num_seqs = a.num_seqs - decodes;
    g.cu_seqlens_q += decodes;
    g.context_lens += decodes;
    g.block_tables += int64_t(decodes) * a.max_blocks_per_seq;
    g.host_cu_seqlens_q += decodes;
    g.host_context_lens += decodes;
    int splits = 0;
    for (const kernels::PagedAttentionArgs* part : {&d, &g}) {
      const kernels::PagedAttentionPlan plan =
          kernels::plan_paged_attention(*part, target, ws.attention.size());
      splits = std::max(splits, plan.num_splits);
      kernels::paged_attention_bf16(*part, plan, ws.attention.data(), stream);
    }
    last_attention_splits_ = splits;
    last_attention_parts_ = 2;
    return;
  }
  const kernels::PagedAttentionPlan plan =
      kernels::plan_paged_attention(a, target, ws.attention.size());
  last_attention_splits_ = plan.num_splits;
  last_attention_parts_ = 1;
  kernels::paged_attention_bf16(a, plan, ws.attention.data(), stream);
}

void CudaBackend::silu_mul(const Stream& s, const Tensor& gate_up, Tensor& out) {
  expect_2d(gate_up, DType::bf16, "silu_mul", "gate_up");
  expect_2d(out, DType::bf16, "silu_mul", "out");
  const int64_t F = out.shape[1];
  expect(gate_up.shape[1] == 2 * F && gate_up.shape[0] == out.shape[0], "silu_mul",
         fmt::format("gate_up {} does not match out {}", gate_up.describe(), out.describe()));
  kernels::silu_mul_bf16(bf16(gate_up), gate_up.stride[0], out.shape[0], F, bf16(out),
                         out.stride[0], stream_of(s));
}

namespace {
kernels::DecodeDims decode_dims(const DecodeLayersShape& sh, int block_size, int max_blocks) {
  kernels::DecodeDims d;
  d.layers = int(sh.layers);
  d.hidden = int(sh.hidden);
  d.heads = int(sh.heads);
  d.kv_heads = int(sh.kv_heads);
  d.head_dim = int(sh.head_dim);
  d.ffn = int(sh.ffn);
  d.block_size = block_size;
  d.max_blocks = max_blocks;
  return d;
}
bool fits_int(const DecodeLayersShape& sh) {
  const int64_t v[] = {sh.layers, sh.hidden, sh.heads, sh.kv_heads, sh.head_dim, sh.ffn};
  for (int64_t x : v)
    if (x <= 0 || x > (int64_t(1) << 24)) return false;
  return true;
}
}  // namespace

size_t CudaBackend::decode_layers_workspace(const DecodeLayersShape& shape) const {
  if (!options_.decode_kernel || decode_kernel_positions(kDecodeKernelPositions) <= 0 ||
      !fits_int(shape))
    return 0;
  const kernels::DecodeDims d = decode_dims(shape, 16, 1);
  if (kernels::decode_layers_unsupported(d)[0] != 0) return 0;
  return kernels::decode_layers_plan(d, sm_count_).bytes;
}

bool CudaBackend::decode_layers(const Stream& s, const DecodeLayersCall& c) {
  const DecodeLayersShape& sh = c.shape;
  if (!options_.decode_kernel || c.layers.empty() || int64_t(c.layers.size()) != sh.layers ||
      !c.layers[0].kv)
    return false;
  const KvLayer& kv0 = *c.layers[0].kv;
  const int64_t block_size = kv0.block_size();
  const int64_t capacity = block_size * c.max_blocks_per_seq;
  if (capacity <= 0 || capacity > decode_kernel_positions(kDecodeKernelPositions)) return false;
  if (!fits_int(sh)) return false;
  const kernels::DecodeDims d = decode_dims(sh, int(block_size), int(c.max_blocks_per_seq));
  if (kernels::decode_layers_unsupported(d)[0] != 0) return false;
  const int64_t H = sh.hidden, F = sh.ffn, hd = sh.head_dim;
  const int64_t QKV = (sh.heads + 2 * sh.kv_heads) * hd, Q = sh.heads * hd;
  auto dense = [](const Tensor* w, int64_t n, int64_t k) {
    return w && w->device == Device::cuda && w->dtype == DType::bf16 && w->ndim == 2 &&
           w->shape[0] == n && w->shape[1] == k && w->is_contiguous() && aligned16(w->data);
  };
  auto pool = [&](const Tensor& t) {
    return t.device == Device::cuda && t.dtype == DType::bf16 && t.ndim == 4 &&
           t.shape[1] == block_size && t.shape[2] == sh.kv_heads && t.shape[3] == hd &&
           t.is_contiguous() && aligned16(t.data);
  };
  for (const DecodeLayer& l : c.layers)
    if (!dense(l.wqkv, QKV, H) || !dense(l.wo, H, Q) || !dense(l.w_gate_up, 2 * F, H) ||
        !dense(l.w_down, H, F) || !l.kv || !pool(l.kv->k) || !pool(l.kv->v))
      return false;
  const kernels::DecodePlan plan = kernels::decode_layers_plan(d, sm_count_);
  expect(c.workspace && c.workspace_bytes >= plan.bytes, "decode_layers",
         fmt::format("workspace of {} bytes, needs {}", c.workspace_bytes, plan.bytes));
  expect(c.x.device == Device::cuda && c.x.dtype == DType::bf16 && c.x.numel() == H &&
             aligned16(c.x.data),
         "decode_layers",
         fmt::format("x must be {} bf16 device values, got {}", H, c.x.describe()));
  expect_i32(c.positions, 1, "decode_layers", "positions");
  expect_i32(c.slots, 1, "decode_layers", "slots");
  expect_i32(c.context_lens, 1, "decode_layers", "context_lens");
  expect_i32(c.block_table, c.max_blocks_per_seq, "decode_layers", "block_table");
  expect(c.inv_freq.device == Device::cuda && c.inv_freq.dtype == DType::f32 &&
             c.inv_freq.numel() == hd / 2,
         "decode_layers", fmt::format("inv_freq must be {} f32 device values", hd / 2));
  // ~8 KB of kernel parameters: built in place, not on the stack of every caller.
  auto a = std::make_unique<kernels::DecodeLayersArgs>();
  a->dims = d;
  a->eps = c.eps;
  a->scale = c.scale;
  a->x = static_cast<__nv_bfloat16*>(c.x.data);
  a->positions = static_cast<const int32_t*>(c.positions.data);
  a->slots = static_cast<const int32_t*>(c.slots.data);
  a->context_lens = static_cast<const int32_t*>(c.context_lens.data);
  a->block_table = static_cast<const int32_t*>(c.block_table.data);
  a->inv_freq = static_cast<const float*>(c.inv_freq.data);
  a->workspace = c.workspace;
  a->workspace_bytes = c.workspace_bytes;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const DecodeLayer& l = c.layers[i];
    kernels::DecodeLayerPtrs& p = a->layer[i];
    p.wqkv = static_cast<const __nv_bfloat16*>(l.wqkv->data);
    p.wo = static_cast<const __nv_bfloat16*>(l.wo->data);
    p.wgu = static_cast<const __nv_bfloat16*>(l.w_gate_up->data);
    p.wdown = static_cast<const __nv_bfloat16*>(l.w_down->data);
    p.k_pool = static_cast<__nv_bfloat16*>(l.kv->k.data);
    p.v_pool = static_cast<__nv_bfloat16*>(l.kv->v.data);
  }
  kernels::decode_layers(*a, plan, stream_of(s));
  ++decode_layers_calls_;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  RIDGE_CHECK_CUDA(cudaStreamIsCapturing(stream_of(s), &capturing));
  if (plan.trace_on && capturing == cudaStreamCaptureStatusNone)
    add_decode_trace(kernels::decode_layers_trace(*a, plan, stream_of(s)), sh);
  return true;
}

// RIDGE_DECODE_TRACE=1 (eager steps only, e.g. with --no-cuda-graphs): per kind of phase, the mean
// over layers and steps of its span (its last unit's end after the previous phase's), of the
// wait from the previous phase's end to its first unit's release, and of the spread of its
// units' releases; logged when the backend goes away.
void CudaBackend::add_decode_trace(const std::vector<uint64_t>& t, const DecodeLayersShape& sh) {
  constexpr int kKinds = 5;
  if (t.size() < size_t(4 * (1 + kKinds * sh.layers))) return;
  if (decode_trace_.empty()) decode_trace_.assign(kKinds * 3 + 1, 0.0);
  auto at = [&](int64_t p, int i) { return double(t[size_t(p * 4 + i)]); };
  for (int64_t l = 0; l < sh.layers; ++l)
    for (int k = 0; k < kKinds; ++k) {
      const int64_t p = 1 + l * kKinds + k;
      decode_trace_[size_t(k * 3 + 0)] += at(p, 3) - at(p - 1, 3);
      decode_trace_[size_t(k * 3 + 1)] += at(p, 2) - at(p - 1, 3);
      decode_trace_[size_t(k * 3 + 2)] += at(p, 1) - at(p, 2);
    }
  const int64_t last = sh.layers * kKinds;
  decode_trace_[kKinds * 3] += at(last, 3) - at(0, 0);
  ++decode_trace_steps_;
  decode_trace_layers_ = sh.layers;
  const int64_t H = sh.hidden, F = sh.ffn, hd = sh.head_dim;
  decode_trace_bytes_ = {double((sh.heads + 2 * sh.kv_heads) * hd * H * 2), 0.0,
                         double(H * sh.heads * hd * 2), double(2 * F * H * 2), double(H * F * 2)};
}

void CudaBackend::log_decode_trace() const {
  if (decode_trace_steps_ == 0) return;
  const double n = double(decode_trace_steps_ * decode_trace_layers_);
  static const char* kinds[] = {"q|k|v", "attention", "o", "gate|up", "down"};
  std::string text = fmt::format("decode kernel trace over {} steps: kernel {:.1f} us a step; per "
                                 "layer (us): ",
                                 decode_trace_steps_,
                                 decode_trace_[15] / double(decode_trace_steps_) / 1e3);
  for (int k = 0; k < 5; ++k) {
    const double span = decode_trace_[size_t(k * 3)] / n / 1e3;
    text += fmt::format("{}{} span {:.2f} (first release {:.2f} after the previous phase, releases "
                        "spread {:.2f}",
                        k ? "; " : "", kinds[k], span, decode_trace_[size_t(k * 3 + 1)] / n / 1e3,
                        decode_trace_[size_t(k * 3 + 2)] / n / 1e3);
    if (decode_trace_bytes_[size_t(k)] > 0)
      text += fmt::format(", {:.2f} TB/s", decode_trace_bytes_[size_t(k)] / (span * 1e6));
    text += ")";
  }
  log::info("{}", text);
}

void CudaBackend::gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) {
  expect(x.dtype == DType::bf16 || x.dtype == DType::f32, "gather_rows",
         fmt::format("x must be bf16 or f32, got {}", x.describe()));
  expect_2d(x, x.dtype, "gather_rows", "x");
  expect_2d(out, x.dtype, "gather_rows", "out");
  expect(out.shape[1] == x.shape[1], "gather_rows",
         fmt::format("x {} does not match out {}", x.describe(), out.describe()));
  expect_i32(rows, out.shape[0], "gather_rows", "rows");
  kernels::gather_rows(x.data, x.stride[0], x.shape[0], rows.ptr<int32_t>(), out.shape[0],
                       x.shape[1], x.dtype == DType::f32 ? 4 : 2, out.data, out.stride[0],
                       stream_of(s));
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(0, options);
}

bool cuda_device_present(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = fmt::format("CUDA reports {} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
    return false;
  }
  if (count == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = "cudaGetDeviceProperties failed";
    return false;
  }
  if (prop.major != 9 || prop.minor != 0) {
    if (why)
      *why = fmt::format("{} is sm_{}{}; this build of ridge has kernels for sm_90a (Hopper) only",
                         prop.name, prop.major, prop.minor);
    return false;
  }
  return true;
}

}  // namespace ridge::backend
