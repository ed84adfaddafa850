#include "ridge/backend/backend.h"

#include <cstdlib>
#include <algorithm>
#include <new>

namespace ridge::backend {

Buffer Backend::allocate_host(size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return Buffer(p, bytes, [](void* q) { std::free(q); });
}

}  // namespace ridge::backend
