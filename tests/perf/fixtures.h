// Shared by the perf tests: the project's hardware database and the named model shapes.
#pragma once

#include <string>

#include "ridge/model/config.h"
#include "ridge/perf/hardware.h"

namespace ridge::perf::test {

inline const HardwareDb& db() {
  static const HardwareDb d =
      HardwareDb::load_file(std::string(RIDGE_SOURCE_DIR) + "/data/hardware.json");
  return d;
}
inline model::ModelConfig llama2_7b() { return model::ModelConfig::named("llama-2-7b"); }

}  // namespace ridge::perf::test
