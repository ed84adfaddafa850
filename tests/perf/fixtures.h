// Shared by the perf tests: the project's hardware database and the named model shapes.
#pragma once

#include <exception>
#include <string>

#include <gtest/gtest.h>

#include "ridge/core/error.h"
#include "ridge/model/config.h"
#include "ridge/perf/hardware.h"

namespace ridge::perf::test {

inline const HardwareDb& db() {
  static const HardwareDb d =
      HardwareDb::load_file(std::string(RIDGE_SOURCE_DIR) + "/data/hardware.json");
  return d;
}
inline model::ModelConfig llama2_7b() { return model::ModelConfig::named("llama-2-7b"); }

// The message of the ridge::Error `f` throws ("" and a test failure when it throws none, or
// something else: a bare nlohmann exception is the defect the validation tests guard against).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ridge::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

}  // namespace ridge::perf::test
