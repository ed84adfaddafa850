// Programmatic dependent launch (PDL, sm_90): a kernel launched with launch_pdl may start while
// the kernel before it on the stream is still running, so that its launch latency, and any work
// that does not depend on the previous kernel (a GEMV's first weight loads), overlap that
// kernel's tail. In a CUDA graph the captured launches keep this as programmatic edges.
//
// The contract, for every kernel launched with launch_pdl:
//   - it calls pdl::wait() before it reads or writes any memory that an earlier kernel on the
//     stream writes or reads (activations, KV pools, workspaces; weights are read-only and may be
//     read before the wait). wait() returns once every earlier grid has completed and its memory
//     is visible; because each kernel on the chain waits before it finishes, this holds for all
//     earlier kernels, not just the previous one.
//   - every thread of every block reaches wait() (no early return before it), so that the grid
//     cannot complete before its predecessor.
//   - it may call pdl::launch_dependents() to let the next kernel launch before this one ends;
//     without it the next kernel launches when this one's blocks exit. Calling it first, before
//     the wait (pdl::begin()), is safe: the next kernel's wait() still returns only after this
//     grid has completed, which is after this grid's own wait. The next kernel launches once
//     every block of this grid has triggered, i.e. once all of them are resident, so its waiting
//     blocks only take SM space this grid left free (no deadlock), and they run the independent
//     part of their work (a GEMV's first weight loads) meanwhile.
// Kernels launched with <<<>>> are unaffected (wait() is a no-op without the launch attribute),
// and they are full barriers on the chain: no kernel after them starts before they end.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ridge/kernels/cuda/pdl.h"

namespace ridge::kernels::pdl {

__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The start of a kernel on the decode chain: let the next kernel launch, then wait for the
// previous ones.
__device__ __forceinline__ void begin() {
  launch_dependents();
  wait();
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization
// when `programmatic` and enabled(); plainly otherwise (it then starts after the kernel before it
// ends); with this thread's launch_carveout() when set (pdl.h). Returns the launch's error (the
// caller checks it as after <<<>>>).
// cluster: thread-block clusters of that shape (the grid a multiple of it); 1 × 1 × 1: none.
template <typename... Params, typename... Args>
cudaError_t launch(bool programmatic, dim3 cluster, void (*kernel)(Params...), dim3 grid,
                   dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[3];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n++].val.clusterDim.z = cluster.z;
  }
  if (programmatic && enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (const int percent = launch_carveout(); percent >= 0) {
    attr[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attr[n++].val.sharedMemCarveout = static_cast<unsigned>(percent);
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}
// cluster_z > 1: clusters of 1 × 1 × cluster_z CTAs (grid.z a multiple of it).
template <typename... Params, typename... Args>
cudaError_t launch(bool programmatic, unsigned cluster_z, void (*kernel)(Params...), dim3 grid,
                   dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  return launch(programmatic, dim3(1, 1, cluster_z), kernel, grid, block, smem, stream,
                std::forward<Args>(args)...);
}
template <typename... Params, typename... Args>
cudaError_t launch(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t smem, cudaStream_t stream, Args&&... args) {
  return launch(programmatic, dim3(1, 1, 1), kernel, grid, block, smem, stream,
                std::forward<Args>(args)...);
}

// The decode chain's launch: with programmatic stream serialization when enabled().
template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args&&... args) {
  return launch(true, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace ridge::kernels::pdl
