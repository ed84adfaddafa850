// Per-op timing for `ridge bench model --profile-ops`: every op of one engine step, at the step's
// shapes, issued through the Backend interface on buffers of its own (weights rotated over enough
// copies that they come from HBM, as each layer's weights do in a real step; the KV of the real
// pool, a layer at a time). On a CUDA build each op is timed twice: replayed from a CUDA graph of
// `calls` launches (GPU time with the graph's per-node overhead, what the cost model's op time
// is) and launched eagerly back to back (what the host adds when it cannot keep ahead). On the
// CPU backend, host wall time of `calls` calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ridge/engine/model_bundle.h"
#include "ridge/model/forward_batch.h"
#include "ridge/perf/cost_model.h"

namespace ridge::app {

struct OpTime {
  std::string op;           // the cost model's op name (qkv_proj, attn_decode, gather_rows, ...)
  int64_t backend_calls = 0;  // Backend calls per step for this op (q, k, v: 3 per layer)
  double graph_s = -1;      // seconds per step, replayed from a CUDA graph (< 0: not measured)
  double eager_s = -1;      // seconds per step, eager launches back to back (CPU: wall time)
};

struct OpProfileOptions {
  int calls = 32;             // launches of an op per timing (layers cycled)
  int replays = 5;            // graph replays (median)
  bool fused_projections = true;  // q|k|v and gate|up as one matmul each (as the model runs them)
  // The backend's decode fusions (perf::Fusions::parse of BackendOptions::fuse on the GPU, none
  // on the CPU): which ops are timed folded into others. The norm and silu switches are checked
  // against what the backend does (profile_ops says so on stderr where they differ). A norm is
  // timed folded as the model folds it: its weight folded into the GEMM's first
  // (Backend::fold_norm_weight; composed where that returns false), never into q|k|v with biases
  // or a tied LM head (the model config's qkv_bias, tied_embeddings).
  perf::Fusions fusions;
  double l2_bytes = 64.0 * (1 << 20);  // weights rotate over >= 3x this many bytes
};

// The ops of the step `fb` describes (its sequences, context and block tables in b's KV pool),
// in forward order; host copies (the step plan up, the logits down) as op "host_io".
std::vector<OpTime> profile_ops(engine::ModelBundle& b, const model::ForwardBatch& fb,
                                const OpProfileOptions& options);

}  // namespace ridge::app
