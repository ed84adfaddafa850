// Backend selection: CUDA when built and a GPU is present, CPU otherwise.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ridge/backend/backend.h"

namespace ridge::backend {

// How a backend is built. Fields a backend does not use are ignored (the CPU backend reads
// cpu_threads only).
struct BackendOptions {
  int cpu_threads = 0;     // CPU threads (0: all cores)
  std::string cache_root;  // build cache for tuned kernel choices ("" : tune::default_cache_root())
  bool tune = true;        // time the GEMM candidates per shape (else a fixed by-shape rule)
  // GEMM kernels: "auto" (the tuner's or the rule's pick per shape), "cublas" (cuBLASLt only),
  // "ridge" (ridge's own kernels wherever they apply).
  std::string gemm = "auto";
  bool cuda_graphs = true;  // capture decode steps as CUDA graphs (per batch-size bucket)
  // Decode-step fusions (CUDA), a comma list: "norm" (each block's RMSNorm weight folded into the
  // matmul after it at load, the norm then a 1/rms scale in the skinny GEMM's epilogue from the
  // sums of squares the residual-adding GEMM before it left; not for biased q|k|v, the first
  // layer's norm or the final norm), "silu" (SwiGLU in the gate|up GEMV's epilogue), both up to 8
  // tokens; "rope_kv" (RoPE and the KV store in one kernel); "none" or "" for none. The residual
  // adds always run in the o / down matmul epilogues. Measured on the H200 (docs/KERNELS.md,
  // "Run 8"): all three, 4.03 ms a batch-1 step against 4.09 with rope_kv alone.
  std::string fuse = "norm,silu,rope_kv";
  // Programmatic dependent launch: decode kernels start during the previous kernel's tail.
  bool pdl = true;
  // Batch-1 decode steps run every layer in one persistent kernel (CUDA, Backend::decode_layers;
  // needs the "norm" fusion's folded weights), else layer by layer. Opt-in: on the H200 it is
  // level with the layer-by-layer chain so far, 3.97 against 3.95 ms (docs/KERNELS.md, "Run 17").
  bool decode_kernel = false;
  // The fused decode GEMVs at 1-2 tokens in the row-stream GEMV (kernels::SkinnyArgs::stream:
  // the read-only kernel's access pattern) instead of the MMA skinny kernel. Opt-in until it has
  // run on the H200: run 26 measured the pattern (97.5 % of the read ceiling as a chain of pure
  // streams, 84 % with the skinny kernel's addresses), not yet this kernel (docs/KERNELS.md).
  bool gemv_stream = false;
  // Every decode GEMV at one token in the warp-row GEMV (kernels::SkinnyArgs::warp: whole rows a
  // warp, the grid's warps on consecutive rows, the read pattern that reaches 95 % of the read
  // ceiling on the H200 where the MMA kernel's per-block units read at 66-75 %). Without it the
  // tuner measures the warp-row GEMV against the other kernels shape by shape (its choice picks
  // the fused GEMVs' kernel too). RIDGE_GEMV_WARP=1 also forces it; =0 drops the candidate.
  bool gemv_warp = false;
};

// A `fuse` list (BackendOptions::fuse, CLI --fuse) read item by item: "norm", "silu", "rope_kv",
// "swiglu_gemm" (opt-in: SiLU·mul in the sm90 GEMM's epilogue for prefill chunks of 1024+
// tokens); "none" and empty items add nothing. Throws ridge::Error naming any other item. The one
// reader of the list: the CUDA backend and the cost model (perf::Fusions) both use it.
struct FuseList {
  bool norm = false, silu = false, rope_kv = false, swiglu_gemm = false;
};
FuseList parse_fuse_list(std::string_view list);

// "auto" | "cpu" | "cuda". "cuda" without a usable GPU throws ridge::Error saying why.
std::unique_ptr<Backend> make_backend(std::string_view device, const BackendOptions& options = {});
// True when a CUDA device can be used (the build has CUDA and the runtime finds a GPU).
bool cuda_available(std::string* why = nullptr);

}  // namespace ridge::backend
