#include "ridge/backend/cuda/nvml_power.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace ridge::backend::cuda {

// The few NVML entry points used, declared as the driver's nvml.h does (C ABI; nvmlReturn_t is an
// int enum with NVML_SUCCESS = 0, nvmlDevice_t an opaque pointer, nvmlClockType_t an int enum
// with NVML_CLOCK_SM = 1). Power and limits are in mW, the energy counter in mJ.
struct NvmlPower::Api {
  using Device = void*;
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_pci_bus_id)(const char*, Device*) = nullptr;
  int (*power_usage)(Device, unsigned*) = nullptr;
  int (*total_energy)(Device, unsigned long long*) = nullptr;
  int (*clock_info)(Device, int, unsigned*) = nullptr;
  int (*enforced_limit)(Device, unsigned*) = nullptr;
  int (*event_reasons)(Device, unsigned long long*) = nullptr;  // optional
  ~Api() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

namespace {
constexpr int kClockSm = 1;
constexpr unsigned long long kReasonSwPowerCap = 0x4;  // nvmlClocksEventReasonSwPowerCap

template <typename F>
bool resolve(void* lib, const char* name, F*& out) {
  out = reinterpret_cast<F*>(dlsym(lib, name));
  return out != nullptr;
}
}  // namespace

std::unique_ptr<NvmlPower> NvmlPower::open(const std::string& pci_bus_id, std::string* why) {
  auto api = std::make_unique<Api>();
  api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    if (why) *why = fmt::format("libnvidia-ml.so.1 not loadable ({})", dlerror());
    return nullptr;
  }
  int (*init)() = nullptr;
  if (!resolve(api->lib, "nvmlInit_v2", init) ||
      !resolve(api->lib, "nvmlShutdown", api->shutdown) ||
      !resolve(api->lib, "nvmlErrorString", api->error_string) ||
      !resolve(api->lib, "nvmlDeviceGetHandleByPciBusId_v2", api->by_pci_bus_id) ||
      !resolve(api->lib, "nvmlDeviceGetPowerUsage", api->power_usage) ||
      !resolve(api->lib, "nvmlDeviceGetTotalEnergyConsumption", api->total_energy) ||
      !resolve(api->lib, "nvmlDeviceGetClockInfo", api->clock_info) ||
      !resolve(api->lib, "nvmlDeviceGetEnforcedPowerLimit", api->enforced_limit)) {
    if (why) *why = "libnvidia-ml.so.1 lacks an entry point it needs";
    api->shutdown = nullptr;  // never initialized
    return nullptr;
  }
  // Why the clocks are held down: the current name (drivers >= 535), else the deprecated one;
  // without either, power_capped stays false.
  if (!resolve(api->lib, "nvmlDeviceGetCurrentClocksEventReasons", api->event_reasons))
    resolve(api->lib, "nvmlDeviceGetCurrentClocksThrottleReasons", api->event_reasons);
  if (int rc = init(); rc != 0) {
    if (why) *why = fmt::format("nvmlInit failed: {}", api->error_string(rc));
    api->shutdown = nullptr;
    return nullptr;
  }
  Api::Device dev = nullptr;
  if (int rc = api->by_pci_bus_id(pci_bus_id.c_str(), &dev); rc != 0) {
    if (why) *why = fmt::format("no NVML device at PCI {}: {}", pci_bus_id, api->error_string(rc));
    return nullptr;
  }
  return std::unique_ptr<NvmlPower>(new NvmlPower(std::move(api), dev));
}

NvmlPower::NvmlPower(std::unique_ptr<Api> api, void* device) : api_(std::move(api)), device_(device) {}
NvmlPower::~NvmlPower() = default;

std::optional<PowerReading> NvmlPower::read() const {
  unsigned mw = 0, limit_mw = 0, sm = 0;
  if (api_->power_usage(device_, &mw) != 0 || api_->clock_info(device_, kClockSm, &sm) != 0 ||
      api_->enforced_limit(device_, &limit_mw) != 0)
    return std::nullopt;
  PowerReading r;
  r.power_w = mw / 1e3;
  r.sm_clock_mhz = sm;
  r.power_limit_w = limit_mw / 1e3;
  // Boards without an energy counter (pre-Volta) and drivers without event reasons still give
  // the rest.
  if (unsigned long long mj = 0; api_->total_energy(device_, &mj) == 0) r.energy_j = double(mj) / 1e3;
  if (unsigned long long reasons = 0; api_->event_reasons && api_->event_reasons(device_, &reasons) == 0)
    r.power_capped = (reasons & kReasonSwPowerCap) != 0;
  return r;
}

}  // namespace ridge::backend::cuda
