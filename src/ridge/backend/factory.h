// Backend selection: CUDA when built and a GPU is present, CPU otherwise.
#pragma once

#include <memory>
#include <string_view>

#include "ridge/backend/backend.h"

namespace ridge::backend {

// "auto" | "cpu" | "cuda". "cuda" without a usable GPU throws ridge::Error saying why.
std::unique_ptr<Backend> make_backend(std::string_view device, int cpu_threads = 0);
// True when a CUDA device can be used (the build has CUDA and the runtime finds a GPU).
bool cuda_available(std::string* why = nullptr);

}  // namespace ridge::backend
