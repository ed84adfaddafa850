// GPU sampling: one token per row of f32 logits, with engine::Sampler's rules (logit biases and
// banned tokens, penalties,
// temperature, top-k, top-p, min-p, greedy ties to the lowest id, raw logprobs and top-n raw
// logprobs). One thread block of 512 threads per row; vocabularies up to kSampleMaxVocab (2^18).
// The algorithm and its passes are described in sample_row.cuh; sampling_params.h holds the
// argument structs. Determinism: the token depends only on the row's logits, its parameters,
// seed and step (a Philox4x32-10 counter), never on the other rows or the launch; the same inputs
// give the same outputs on a given GPU.
//
// Rows of up to ~50k floats are copied into shared memory (one block per SM then; passes after
// the first read shared memory); longer rows are read from global memory (L2) on each pass, and
// rows with biases or penalties get an adjusted copy in SampleArgs::workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "ridge/kernels/cuda/sampling/sampling_params.h"

namespace ridge::kernels {

// True when rows of `vocab` floats are staged in shared memory on the current device.
bool sample_stages_row(int64_t vocab);
// Workspace bytes kernels::sample needs for `rows` rows (0 when no row has biases or penalties, or
// rows are staged in shared memory).
size_t sample_workspace_bytes(int64_t rows, int64_t vocab, bool any_adjusted);
// Enqueues the sampler on `stream`. Checks shapes and pointers on the host (throws ridge::Error);
// fills in a.staged and a.ws_ld. Does not allocate or synchronize.
void sample(SampleArgs a, cudaStream_t stream);

}  // namespace ridge::kernels
