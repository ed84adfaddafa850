// HostBuffer: owning, 64-byte aligned host memory (RAII, move-only).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace ridge {

class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!data_) throw std::bad_alloc();
  }
  ~HostBuffer() { std::free(data_); }
  HostBuffer(HostBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ridge
