#include "ridge/backend/factory.h"

#include "ridge/backend/cpu/cpu_backend.h"
#include "ridge/core/error.h"

namespace ridge::backend {

FuseList parse_fuse_list(std::string_view list) {
  FuseList f;
  for (size_t at = 0; at <= list.size();) {
    size_t end = list.find(',', at);
    if (end == std::string_view::npos) end = list.size();
    const std::string_view item = list.substr(at, end - at);
    if (item == "norm")
      f.norm = true;
    else if (item == "silu")
      f.silu = true;
    else if (item == "rope_kv")
      f.rope_kv = true;
    else if (item == "swiglu_gemm")
      f.swiglu_gemm = true;
    else if (!item.empty() && item != "none")
      fail("--fuse: unknown fusion '{}' (expected a comma list of norm, silu, rope_kv, "
           "swiglu_gemm, or none)",
           item);
    at = end + 1;
  }
  return f;
}

#if RIDGE_BACKEND_HAS_CUDA
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);  // backend/cuda
bool cuda_device_present(std::string* why);
#endif

bool cuda_available(std::string* why) {
#if RIDGE_BACKEND_HAS_CUDA
  return cuda_device_present(why);
#else
  if (why) *why = "this build of ridge has no CUDA backend";
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(std::string_view device, const BackendOptions& options) {
  const int cpu_threads = options.cpu_threads;
  if (device == "cpu") return std::make_unique<CpuBackend>(cpu_threads);
  if (device == "auto" || device == "cuda") {
    std::string why;
    if (cuda_available(&why)) {
#if RIDGE_BACKEND_HAS_CUDA
      return make_cuda_backend(options);
#endif
    }
    if (device == "cuda") fail("--device cuda: no usable GPU ({})", why);
    return std::make_unique<CpuBackend>(cpu_threads);
  }
  fail("unknown device '{}' (expected auto, cpu or cuda)", device);
}

}  // namespace ridge::backend
