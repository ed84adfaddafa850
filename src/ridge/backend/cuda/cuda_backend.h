// CudaBackend: every op of backend.h on one NVIDIA GPU (built for sm_90a: Hopper).
//
// Numerics: bf16 activations, fp32 math inside every op (norms, softmax, RoPE, SwiGLU), matmul
// through cuBLASLt with bf16 operands and fp32 accumulation (f32 output for the logits).
// Weights (upload_weight): matrices (ndim >= 2) become bf16 on the device: f32/f16 converted,
// bf16 copied, GGUF q8_0/q4_0/q4_1 dequantized by a kernel on the GPU. Vectors (ndim 1: norm
// weights, biases) stored as f32/f16/bf16 become f32 (they are tiny, and the norms read them in
// fp32 anyway). The KV pools are bf16.
//
// Streams: every op runs on the Stream passed in; a null handle means the backend's own stream.
// Ops never allocate and never synchronize (except download to the host). Each stream gets its own
// workspace (cuBLASLt's, and attention's split-KV partials), allocated once at the stream's first
// use, so two ForwardBatches on two streams never share scratch memory.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ridge/backend/backend.h"
#include "ridge/backend/factory.h"
#include "ridge/tune/autotuner.h"
#include "ridge/tune/build_cache.h"
#include "ridge/backend/cuda/cuda_matmul.h"
#include "ridge/backend/cuda/cuda_resources.h"
#include "ridge/backend/cuda/nvml_power.h"

namespace ridge::kernels {
struct SkinnyRopeKv;
enum class WindowLoader : uint8_t;
}

namespace ridge::backend {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device = 0, const BackendOptions& options = {});
  ~CudaBackend() override;
  Device device() const override { return Device::cuda; }
  std::string name() const override { return name_; }
  DType activation_dtype() const override { return DType::bf16; }
  std::vector<DType> kv_dtypes() const override { return {DType::bf16, DType::fp8_e4m3}; }

  Buffer allocate(size_t bytes) override;
  void upload(const Stream& s, void* dst, const void* src, size_t bytes) override;
  void download(const Stream& s, void* dst, const void* src, size_t bytes) override;
  void synchronize(const Stream& s) override;
  Tensor upload_weight(const Tensor& host) override;
  Tensor upload_weight_rows(std::span<const Tensor> parts) override;
  Buffer allocate_host(size_t bytes) override;
  size_t workspace_bytes() const override;
  // Through NVML (nvml_power.h); absent where the driver gives none.
  std::optional<PowerReading> power_reading() const override;
  // Folds when the "norm" fusion is on (--fuse norm) and w is a dense bf16 weight.
  bool fold_norm_weight(Tensor& w, const Tensor& norm_weight) override;
  bool quantize_weight(Tensor& w, DType dtype) override;
  // How many fp8 matmuls ran each way (enqueued, eager or captured): tests and logs.
  struct Fp8Paths {
    int64_t per_row = 0;       // cuBLASLt with both scale vectors
    int64_t scale_kernel = 0;  // unscaled, then ridge's scaling kernel
    int64_t gemv = 0;          // kernels::gemv_fp8 (1-4 tokens, unless RIDGE_FP8_GEMV=0)
    int64_t total() const { return per_row + scale_kernel + gemv; }
  };
  Fp8Paths fp8_paths() const {
    return {fp8_per_row_calls_.load(), fp8_scale_kernel_calls_.load(), fp8_gemv_calls_.load()};
  }
  void prepare_matmuls(std::span<const MatmulShape> shapes, int64_t max_tokens) override;
  std::unique_ptr<Graph> capture(const Stream& s,
                                 const std::function<void(const Stream&)>& body) override;

  // The decode chain, up to kDecodeChainTokens rows and kDecodeChainPositions in all: every kernel
  // launched through pdl::launch asks for one shared-memory carveout (kDecodeCarveout), and the
  // fused GEMVs start early with PDL; otherwise the driver's carveouts and plain GEMV launches.
  void begin_forward(int64_t tokens, int64_t max_context) override;
  void embedding(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out) override;
  void embedding_sumsq(const Stream& s, const Tensor& table, const Tensor& ids, Tensor& out,
                       int record_sumsq) override;
  void rmsnorm(const Stream& s, const Tensor& x, const Tensor& weight, float eps,
               Tensor& out) override;
  void add_rmsnorm(const Stream& s, Tensor& residual, const Tensor& x, const Tensor& weight,
                   float eps, Tensor& out) override;
  void matmul(const Stream& s, const Tensor& x, const Tensor& w, const Tensor* bias,
              Tensor& out) override;
  void matmul_add(const Stream& s, const Tensor& x, const Tensor& w, Tensor& out) override;
  // Fused into one skinny-GEMM launch (prologue in the activation loads, residual add in the
  // epilogue) up to kernels::skinny_prologue_max_tokens tokens; composed above that.
  void matmul_fused(const Stream& s, const Tensor& x, const Tensor& w, const MatmulFusion& fusion,
                    Tensor& scratch, Tensor& out) override;
  void matmul_swiglu(const Stream& s, const Tensor& x, const Tensor& w, const MatmulFusion& fusion,
                     Tensor& scratch, Tensor& gate_up, Tensor& out) override;
  void rope(const Stream& s, Tensor& q, Tensor& k, const Tensor& positions,
            const Tensor& inv_freq) override;
  void kv_store(const Stream& s, const Tensor& k, const Tensor& v, const Tensor& slots,
                KvLayer& kv) override;
  void rope_kv_store(const Stream& s, Tensor& q, Tensor& k, const Tensor& v,
                     const Tensor& positions, const Tensor& inv_freq, const Tensor& slots,
                     KvLayer& kv) override;
  // The skinny GEMV's rope_kv epilogue (--fuse rope_kv) up to kFusedMaxTokens tokens.
  bool matmul_rope_kv(const Stream& s, const Tensor& x, const Tensor& w, const MatmulFusion& fusion,
                      Tensor& scratch, Tensor& qkv, const Tensor& positions,
                      const Tensor& inv_freq, const Tensor& slots, KvLayer& kv) override;
  void attention(const Stream& s, const Tensor& q, const KvLayer& kv, const AttentionMeta& meta,
                 float scale, Tensor& out) override;
  void silu_mul(const Stream& s, const Tensor& gate_up, Tensor& out) override;
  void gather_rows(const Stream& s, const Tensor& x, const Tensor& rows, Tensor& out) override;
  // The persistent batch-1 decode kernel (kernels/cuda/decode; BackendOptions::decode_kernel,
  // opt-in): bf16 weights and KV pools, head dims 64/128/256, a context capacity up to
  // kDecodeKernelPositions (RIDGE_DECODE_KERNEL).
  size_t decode_layers_workspace(const DecodeLayersShape& shape) const override;
  bool decode_layers(const Stream& s, const DecodeLayersCall& call) override;
  // decode_layers calls that ran the kernel (tests and benchmarks).
  int64_t decode_layers_calls() const { return decode_layers_calls_; }

  int sm_count() const { return sm_count_; }
  // Graphs captured so far (tests and benchmarks).
  int graphs_captured() const { return graphs_captured_; }

  // The matmul kernels behind matmul(): cuBLASLt (its heuristic's first algorithm, and its second
  // to fourth as tuner candidates too unless RIDGE_CUBLAS_ALGOS says fewer), or ridge's own
  // (kernels/cuda/gemm: the skinny, row-warp skinny, weight-stream, window and sm90 kernels, and
  // at one token the warp-row GEMV, whose choice also picks the fused one-token GEMVs' kernel).
  enum class GemmKernel : uint8_t {
    cublas,
    skinny,
    sm90,
    cublas_2,
    cublas_3,
    cublas_4,
    skinny_rows,
    stream,
    window,
    warp_rows
  };
  static const char* gemm_name(GemmKernel k);
  // The window candidate's loader (kernels::WindowLoader): RIDGE_GEMM_WINDOW=bulk or =dynamic,
  // else every thread's cp.async.
  static kernels::WindowLoader window_loader();
  // Whether the warp-row GEMV is a candidate at one token: yes unless RIDGE_GEMV_WARP=0 (A/B runs).
  static bool warp_rows_candidate();
  // Whether the fused one-token SwiGLU GEMV runs in the warp-row GEMV whatever the tuner chose
  // (by default; not with --gemv-stream, --gemm cublas or RIDGE_GEMV_WARP_SWIGLU=0).
  bool swiglu_in_warp_rows() const;
  // Which of cuBLASLt's heuristic algorithms k runs (0 its first), or -1 for ridge's kernels.
  static int cublas_algo(GemmKernel k);
  // The kernel gemm_name() calls `name` (cublas for a name this build does not know).
  static GemmKernel kernel_named(const std::string& name);
  // The kernel matmul() runs for T tokens against a [N, K] weight (when ridge's kernels apply:
  // bf16 out, dense rows, 16-byte aligned).
  GemmKernel choose_gemm(int64_t T, int64_t N, int64_t K) const;
  // The tuned choices so far (gemm_name() of each), ordered by N, K, token bucket.
  std::vector<MatmulChoice> matmul_choices() const override;
  std::string one_token_swiglu_kernel() const override;
  // Tests: makes matmul() run `kernel` for T's token bucket against [N, K] weights (where ridge's
  // kernels apply), as if the tuner had chosen it; nullopt forgets the choice again.
  void set_gemm_choice(int64_t T, int64_t N, int64_t K, std::optional<GemmKernel> kernel);
  // How many KV splits attention chose on its last call (for tests and benchmarks).
  int last_attention_splits() const { return last_attention_splits_; }
  // How many attention launches its last call made: 2 when a mixed batch's leading decodes went
  // to the decode kernel and the rest to the general one, else 1.
  int last_attention_parts() const { return last_attention_parts_; }

 private:
  struct Workspace {
    cuda::DeviceMemory cublas;
    cuda::DeviceMemory attention;
    cuda::DeviceMemory split_counters;  // zeroed ints: decode attention's in-kernel split merge
    cuda::DeviceMemory stream_gemm;     // zeroed: the weight-stream GEMM's partials and tickets
    cuda::DeviceMemory gemv_stream;     // the row-stream GEMV's row sums, then its zeroed tickets
    cuda::DeviceMemory window_gemm;     // the window GEMV's zeroed tickets and partial sums
    // MatmulFusion::record_sumsq: per tag, the skinny GEMM's partial sums of squares of the rows
    // it stored (kSumsqFloats each) and what they describe.
    cuda::DeviceMemory sumsq;
    // The fp8 matmul's activations: E4M3 codes [tokens, K] and per-token scales, sized by
    // prepare_matmuls for the model's largest step (or grown by an eager call that needs more).
    cuda::DeviceMemory fp8_x, fp8_scales;
    // Where cuBLASLt refuses per-row scales: its unscaled fp32 product, scaled by ridge's kernel.
    cuda::DeviceMemory fp8_product;
    std::vector<cuda::DeviceMemory> retired_buffers;  // outgrown buffers (graphs may hold them)
    struct SumsqRecord {
      const void* out = nullptr;
      int64_t rows = 0, cols = 0;
      int64_t parts = 0;  // per row: kernels::skinny_sumsq_out_parts of the call that recorded
    };
    SumsqRecord sumsq_records[MatmulFusion::kSumsqTags];
    size_t retired() const {
      size_t n = 0;
      for (const auto& m : retired_buffers) n += m.size();
      return n;
    }
    size_t bytes() const {
      return cublas.size() + attention.size() + split_counters.size() + stream_gemm.size() +
             gemv_stream.size() + window_gemm.size() + sumsq.size() + fp8_x.size() +
             fp8_scales.size() + fp8_product.size() + retired();
    }
  };
  static constexpr int64_t kSumsqFloats = 16384;  // per tag: partial sums × rows
  // The row-stream GEMV's capacity in weight rows (SkinnyStreamWorkspace::max_rows): 528 KB.
  static constexpr int kGemvStreamRows = 65536;
  // The decode fusions (norm, silu) run up to this many tokens (the kernel takes 16): at 16 the
  // skinny GEMV loses more to cuBLASLt on q|k|v and gate|up than the fusions save (H200, run 8).
  static constexpr int64_t kFusedMaxTokens = 8;
  // --fuse swiglu_gemm: gate|up and SwiGLU in the sm90 GEMM's epilogue from this many tokens (where
  // that kernel runs at about cuBLASLt's speed: M >= 2048 in run 11's table, so prefill chunks).
  static constexpr int64_t kSwigluGemmMinTokens = 1024;
  cudaStream_t stream_of(const Stream& s) const;
  void upload_into(const Tensor& host, void* dst, DType target);
  bool ridge_gemm_applies(const Tensor& x, const Tensor& w, const Tensor& out) const;
  // matmul_fused / matmul_swiglu (the SwiGLU epilogue: out [T, N/2]) after their checks: the
  // skinny kernel with the fusions that apply, else composed.
  // rope_kv: the rope_kv epilogue's inputs (SkinnyArgs::rope; the skinny kernel then
  // runs whatever the prologue; the caller checked that it can).
  void run_fused(const Stream& s, const Tensor& x, const Tensor& w, const MatmulFusion& f,
                 Tensor& scratch, Tensor& out, bool swiglu,
                 const kernels::SkinnyRopeKv* rope_kv = nullptr);
  // accumulate: out += x·wᵀ (the residual epilogue; cuBLASLt with beta = 1).
  void run_gemm(GemmKernel kernel, const Tensor& x, const Tensor& w, Tensor& out,
                cudaStream_t stream, bool accumulate = false);
  void check_matmul(const char* op, const Tensor& x, const Tensor& w, const Tensor& out,
                    int64_t x_cols) const;
  // out (+)= x · wᵀ for an fp8_e4m3 row-scaled w (quantize_weight): at 1-4 tokens the fp8 GEMV
  // (try_gemv_fp8); else x quantized per token into the stream's workspace, then cuBLASLt's fp8
  // GEMM with both scale vectors.
  void run_gemm_fp8(const Tensor& x, const Tensor& w, Tensor& out, cudaStream_t stream,
                    bool accumulate);
  // out (+)= x · wᵀ for an fp8 w at 1..kGemvFp8MaxTokens tokens through kernels::gemv_fp8, which
  // quantizes x itself; with `norm`, x is first rmsnorm(x; norm, eps); with swiglu, w stacks gate
  // and up rows and out [T, N/2] = silu(gate) · up. False where it does not apply (the GEMV is
  // off, the shapes do not fit it, or a fusion is asked with RIDGE_FP8_FUSE=0): the caller then
  // composes the kernels.
  bool try_gemv_fp8(const Tensor& x, const Tensor& w, const Tensor* norm, float eps, bool swiglu,
                    bool accumulate, Tensor& out, cudaStream_t stream);
  // Grows ws's fp8 activation buffers to tokens × cols (never while `stream` is capturing).
  void reserve_fp8_activations(Workspace& ws, int64_t tokens, int64_t cols, cudaStream_t stream);
  // Times the GEMM candidates for every shape and token bucket up to max_tokens (cuda_tune.cpp).
  void tune_gemms(std::span<const MatmulShape> shapes, int64_t max_tokens);
  static int64_t token_bucket(int64_t T);
  tune::DeviceKey device_key() const;
  // Token buckets above this are not tuned (they take the by-shape rule: cuBLASLt).
  static constexpr int64_t kMaxTunedTokens = 4096;
  struct GemmKey {
    int64_t t_bucket, n, k;
    bool operator==(const GemmKey&) const = default;
  };
  struct GemmKeyHash {
    size_t operator()(const GemmKey& k) const {
      return std::hash<int64_t>()(k.t_bucket * 1000003 + k.n * 7919 + k.k);
    }
  };
  Workspace& workspace_for(cudaStream_t stream);
  // Grows every stream's window-GEMV workspace (Workspace::window_gemm) to at least `bytes`, now
  // and for streams that get a workspace later (tune_gemms, before any graph is captured; an
  // outgrown buffer is retired, not freed, as graphs may hold it).
  void reserve_window_gemm(size_t bytes);

  int device_ = 0;
  BackendOptions options_;
  bool fuse_norm_ = false, fuse_silu_ = false, fuse_rope_kv_ = false;  // options_.fuse
  // begin_forward: this pass is the small-batch decode chain (one carveout, PDL GEMVs).
  bool decode_chain_ = false;
  // The decode chain's carveout, in percent of 228 KB: 58 -> 132 KB of shared memory (one
  // decode-attention block with a 2- or 3-stage ring, 74 or 106 KB; two GEMV blocks with one
  // staged step each) and 124 KB of L1, which the GEMVs' register loads need. H200, run 13,
  // ridge-bench-gemm --decode-chain: the GEMV chain with plain launches 3736 us at 58 %, 3774 at
  // 44 %, 3702 with the driver's carveouts, 4001 at 72 %, 4388 at 100 %; with PDL 3575 at 58 %.
  // The engine's batch-1 step: 3.948 ms at 58 %, 3.944 at 44 %, 3.997 with plain GEMVs.
  static constexpr int kDecodeCarveout = 58;
  // The carveout leaves decode attention one block per SM (two or three without it), so the
  // chain applies while tokens × context is at most this: the attention's (sequence, head,
  // 256-position split) blocks then fit one wave on 132 SMs. H200, run 13 (d6): batch 1 at 256
  // positions 3.934 ms with the chain against 3.998 without; at 2048 positions 4.686 against 4.490.
  // Run 14 (e1): batch 1 at 512-640 positions 4.092 against 4.146, at 896-1024 4.125 against
  // 4.170; batch 2 (128-256 positions) 4.041 against 4.048; batch 4 4.154 against 4.127. So the
  // chain stops at 2 tokens.
  static constexpr int64_t kDecodeChainPositions = 1024;
  static constexpr int64_t kDecodeChainTokens = 2;
  // The persistent decode kernel runs up to this context capacity (positions of the step's
  // block table): its attention takes up to 32 chunks of a head, each a warp's loop.
  static constexpr int64_t kDecodeKernelPositions = 2048;
  int64_t decode_layers_calls_ = 0;
  // RIDGE_DECODE_TRACE=1: the decode kernel's phase stamps, summed per kind (cuda_backend.cpp).
  void add_decode_trace(const std::vector<uint64_t>& stamps, const DecodeLayersShape& shape);
  void log_decode_trace() const;
  std::vector<double> decode_trace_, decode_trace_bytes_;
  int64_t decode_trace_steps_ = 0, decode_trace_layers_ = 0;
  bool fuse_swiglu_gemm_ = false;  // options_.fuse "swiglu_gemm" (opt-in; run 12: within noise)
  int sm_count_ = 0;
  std::string name_;
  std::unique_ptr<cuda::OwnedStream> stream_;
  mutable std::once_flag nvml_once_;               // power_reading() opens NVML once
  mutable std::unique_ptr<cuda::NvmlPower> nvml_;  // null without NVML
  std::unique_ptr<cuda::CublasLtHandle> lt_;
  std::unique_ptr<cuda::LtMatmul> matmul_;
  mutable std::mutex workspace_mutex_;
  std::unordered_map<cudaStream_t, std::unique_ptr<Workspace>> workspaces_;
  size_t window_gemm_bytes_ = 0;  // (workspace_mutex_) reserve_window_gemm's size
  std::vector<cuda::DeviceMemory> weights_;
  int64_t fp8_max_cols_ = 0;  // the widest K of a quantize_weight'ed matrix (0: none)
  int64_t fp8_tokens_ = 0;    // the fp8 activation buffers' tokens (prepare_matmuls)
  // fp8 matmuls by path: cuBLASLt's per-row scales, or (where it refuses them for a shape, or
  // RIDGE_FP8_SCALE_KERNEL=1 forces it) its unscaled product scaled by kernels::scale_fp8_product
  // out of a per-stream buffer of kFp8ProductBytes.
  bool fp8_force_scale_kernel_ = false;
  bool fp8_gemv_ = true;  // kernels::gemv_fp8 at 1-4 tokens (RIDGE_FP8_GEMV=0: cuBLASLt)
  // Its norm prologue and SwiGLU pairing (RIDGE_FP8_FUSE=0: the norm and silu_mul kernels).
  bool fp8_fuse_ = true;
  std::atomic<bool> fp8_refusal_logged_{false};
  std::atomic<int64_t> fp8_per_row_calls_{0}, fp8_scale_kernel_calls_{0}, fp8_gemv_calls_{0};
  static constexpr size_t kFp8ProductBytes = size_t(64) << 20;
  int last_attention_splits_ = 0;
  int last_attention_parts_ = 0;
  int graphs_captured_ = 0;
  std::unique_ptr<tune::BuildCache> cache_;
  std::unique_ptr<tune::Autotuner> tuner_;
  mutable std::mutex gemm_mutex_;
  std::unordered_map<GemmKey, GemmKernel, GemmKeyHash> gemm_choice_;

 public:
  // GPU sampling (cuda_sampling.cpp over kernels/cuda/sampling): Backend::sample on the device.
  // Returns false only for vocabularies past the kernel's limit (2^18).
  bool sample(const Stream& s, const Tensor& logits, const SamplingBatch& batch, Tensor& tokens,
              Tensor& logprobs, Tensor& top_ids, Tensor& top_logprobs) override;

 private:
  // sample()'s grow-only buffers (pinned staging of the row parameters and penalty lists, their
  // device copy, the workspace for penalized copies of long rows); defined in cuda_sampling.cpp.
  struct SamplingBuffers;
  std::unique_ptr<SamplingBuffers, void (*)(SamplingBuffers*)> sampling_{nullptr, nullptr};
  std::mutex sampling_mutex_;
};

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
// True when a GPU this build can run on (compute capability 9.0) is present; otherwise false
// with the reason in *why.
bool cuda_device_present(std::string* why);

}  // namespace ridge::backend
