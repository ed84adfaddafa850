// backend/cuda/nvml_power: a GPU's power, energy counter, SM clock and power-cap state through
// NVML, the driver's management library, loaded at run time (dlopen of libnvidia-ml.so.1). No
// link dependency: builds and machines without an NVIDIA driver are unaffected, and a GPU whose
// driver lacks NVML simply has no readings. Reading only; nothing on the card is set.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ridge/backend/backend.h"

namespace ridge::backend::cuda {

class NvmlPower {
 public:
  // The NVML device of this PCI bus id ("0000:1A:00.0", as cudaDeviceGetPCIBusId writes it).
  // Null when NVML or the device cannot be opened; `why` then says what failed.
  static std::unique_ptr<NvmlPower> open(const std::string& pci_bus_id, std::string* why);
  ~NvmlPower();
  NvmlPower(const NvmlPower&) = delete;
  NvmlPower& operator=(const NvmlPower&) = delete;

  // Absent when NVML fails to answer (a transient driver error): metrics then leave it out.
  std::optional<PowerReading> read() const;

 private:
  struct Api;
  NvmlPower(std::unique_ptr<Api> api, void* device);
  std::unique_ptr<Api> api_;
  void* device_;  // nvmlDevice_t
};

}  // namespace ridge::backend::cuda
