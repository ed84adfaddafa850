// The GPU sampler's kernel run on the CPU (simt_emulator.h), for tests of the code around it:
// emulation::sample() runs sample_row.cuh over host memory; make_sampling_backend() is a Backend
// whose sample() is that kernel and whose other ops go to an inner (CPU) backend, so that
// engine::DeviceSampler and the engine's device-sampling path run end to end without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ridge/backend/backend.h"
#include "ridge/kernels/cuda/sampling/sampling_params.h"

namespace ridge::kernels::emulation {

// Runs the kernel for every row of `a` (host pointers; a.staged and a.ws_ld are set here, and the
// workspace is provided here when a.workspace is null) with blocks of `threads` threads. Returns
// the emulator's error ("" when the kernel ran cleanly).
std::string sample(SampleArgs a, int threads = 32);

// inner: the backend every other op goes to (null: those ops throw). Its "device" memory must be
// host memory (the CPU backend).
std::unique_ptr<backend::Backend> make_sampling_backend(std::unique_ptr<backend::Backend> inner);

// Calls of sample() on backends made by make_sampling_backend, process-wide (tests check that the
// device path ran).
int64_t sample_calls();

}  // namespace ridge::kernels::emulation
