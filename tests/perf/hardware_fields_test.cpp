// The accelerator database's checks on the real files (data/hardware.json, data/profiles/*.json):
// one field mutated in memory, and the error must name the file, the accelerator and the field
// (a wrongly typed optional field used to escape as a bare nlohmann type_error).
#include <cmath>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "perf/fixtures.h"
#include "ridge/core/error.h"
#include "ridge/io/safetensors.h"
#include "ridge/perf/hardware.h"

namespace ridge::perf {
namespace {

using test::error_of;

const std::string kDbPath = std::string(RIDGE_SOURCE_DIR) + "/data/hardware.json";
const std::string kProfilePath = std::string(RIDGE_SOURCE_DIR) + "/data/profiles/h200-ridge.json";

nlohmann::json read_json(const std::string& path) { return io::read_json_file(path); }

const HardwareDb& real_db() {
  static const HardwareDb d = HardwareDb::load_file(kDbPath);
  return d;
}

// The JSON node at a dotted path ("links.nvlink.direction") under `root`, created if absent.
nlohmann::json& at(nlohmann::json& root, const std::string& dotted) {
  nlohmann::json* j = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    j = &(*j)[dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start)];
    if (dot == std::string::npos) return *j;
    start = dot + 1;
  }
}


std::string parse_error(const nlohmann::json& doc) {
  return error_of([&] { HardwareDb::parse(doc, kDbPath); });
}
std::string profile_error(const nlohmann::json& doc) {
  return error_of([&] {
    HardwareDb copy = real_db();
    copy.merge(doc, kProfilePath);
  });
}

void expect_names(const std::string& msg, std::initializer_list<std::string> needles) {
  for (const auto& n : needles)
    EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

TEST(HardwareFields, RealFilesLoadUnchanged) {
  EXPECT_NO_THROW(HardwareDb::parse(read_json(kDbPath), kDbPath));
  HardwareDb copy = real_db();
  EXPECT_NO_THROW(copy.merge(read_json(kProfilePath), kProfilePath));
}

TEST(HardwareFields, WronglyTypedOptionalFieldsNameFileAcceleratorAndField) {
  const nlohmann::json base = read_json(kDbPath);
  struct Case {
    std::string path;  // under accelerators.h100-sxm
    nlohmann::json value;
    std::string field;  // as the error names it
  };
  const Case cases[] = {
      {"measured", "yes", "measured"},
      {"memory_type", 5, "memory_type"},
      {"memory_bandwidth.estimate", "x", "memory_bandwidth.estimate"},
      {"dense_flops.bf16.estimate", 1, "dense_flops.bf16.estimate"},
      {"links.nvlink.direction", 2, "links.nvlink.direction"},
      {"links.nvlink.generation", 4, "links.nvlink.generation"},
      {"links.pcie.generation", nlohmann::json::array({"PCIe", 5}), "links.pcie.generation"},
      {"base", 7, "base"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    nlohmann::json doc = base;
    at(doc["accelerators"]["h100-sxm"], c.path) = c.value;
    expect_names(parse_error(doc), {kDbPath, "'h100-sxm'", "'" + c.field + "'"});
  }
  // A wrongly typed default is reported against the first accelerator that inherits it.
  nlohmann::json doc = base;
  doc["defaults"]["kernel_overhead"]["estimate"] = "x";
  expect_names(parse_error(doc), {kDbPath, "accelerator", "kernel_overhead.estimate"});
  doc = base;
  doc["defaults"] = "none";
  expect_names(parse_error(doc), {kDbPath, "defaults"});
  // The document's own schema.
  doc = base;
  doc["schema"] = 1;
  expect_names(parse_error(doc), {kDbPath, "schema", "ridge-hardware/1"});
}

TEST(HardwareFields, WronglyTypedProfileFieldsNameFileAcceleratorAndField) {
  const nlohmann::json base = read_json(kProfilePath);
  const std::string id = base["accelerators"].begin().key();
  for (const auto& [path, value] : std::initializer_list<std::pair<std::string, nlohmann::json>>{
           {"measured", "yes"},
           {"memory_bandwidth.estimate", "x"},
           {"memory_type", 5},
           {"base", 7}}) {
    SCOPED_TRACE(path);
    nlohmann::json doc = base;
    at(doc["accelerators"][id], path) = value;
    expect_names(profile_error(doc), {kProfilePath, "'" + id + "'", "'" + path + "'"});
  }
  nlohmann::json doc = base;
  doc["schema"] = 1;
  expect_names(profile_error(doc), {kProfilePath, "schema"});
}

TEST(HardwareFields, WholeNumberCounts) {
  const nlohmann::json base = read_json(kDbPath);
  nlohmann::json doc = base;
  doc["accelerators"]["h100-sxm"]["max_warps_per_sm"] = {
      {"value", 1.5}, {"unit", "count"}, {"source", "x"}};
  expect_names(parse_error(doc), {kDbPath, "'h100-sxm'", "'max_warps_per_sm'", "whole number"});
  doc = base;
  doc["defaults"]["max_warps_per_sm"]["value"] = 63.5;
  expect_names(parse_error(doc), {kDbPath, "'max_warps_per_sm'", "whole number"});
  doc = base;
  doc["accelerators"]["h100-sxm"]["sms"]["value"] = 131.5;
  expect_names(parse_error(doc), {kDbPath, "'h100-sxm'", "'sms'", "whole number"});
  // A whole number still loads.
  doc = base;
  doc["accelerators"]["h100-sxm"]["max_warps_per_sm"] = {
      {"value", 48}, {"unit", "count"}, {"source", "x"}};
  EXPECT_EQ(HardwareDb::parse(doc, kDbPath).get("h100-sxm").max_warps_per_sm, 48);
}

TEST(HardwareFields, NonFiniteZeroOrNegativeFiguresAreRefused) {
  const double kInf = std::numeric_limits<double>::infinity();
  const double bad_values[] = {std::numeric_limits<double>::quiet_NaN(), kInf, -kInf, 0.0, -1.0};
  const nlohmann::json db_doc = read_json(kDbPath);
  // Bandwidths, FLOP/s, sizes, power and price of a datasheet entry, and the defaults' bandwidths.
  for (const std::string path :
       {"accelerators.h100-sxm.dense_flops.bf16", "accelerators.h100-sxm.dense_flops.fp8",
        "accelerators.h100-sxm.memory", "accelerators.h100-sxm.memory_bandwidth",
        "accelerators.h100-sxm.links.nvlink", "accelerators.h100-sxm.links.pcie",
        "accelerators.h100-sxm.tdp", "accelerators.h100-sxm.price", "accelerators.h100-sxm.l2",
        "accelerators.h100-sxm.sms", "defaults.host_copy_bandwidth",
        "defaults.pinned_copy_bandwidth"}) {
    for (double v : bad_values) {
      SCOPED_TRACE(path + " = " + std::to_string(v));
      nlohmann::json doc = db_doc;
      at(doc, path + ".value") = v;
      const std::string entry = "accelerators.h100-sxm.";
      const bool own = path.rfind(entry, 0) == 0;
      const std::string field = own ? path.substr(entry.size()) : path.substr(path.find('.') + 1);
      const std::string msg = parse_error(doc);
      expect_names(msg, {kDbPath, "accelerator", "'" + field + "'"});
      if (own) expect_names(msg, {"'h100-sxm'"});
      EXPECT_TRUE(msg.find("not finite") != std::string::npos ||
                  msg.find("plausible range") != std::string::npos)
          << msg;
    }
  }
  // The measured figures of a profile: power cap rates, idle power, efficiencies.
  const nlohmann::json prof = read_json(kProfilePath);
  const std::string id = prof["accelerators"].begin().key();
  const std::string eff = prof["accelerators"][id]["efficiency"].begin().key();
  for (const std::string& path :
       {std::string("power_capped_flops"), std::string("power_capped_bandwidth"),
        std::string("idle_power"), std::string("memory_bandwidth"), std::string("dense_flops.bf16"),
        "efficiency." + eff}) {
    for (double v : bad_values) {
      SCOPED_TRACE(path + " = " + std::to_string(v));
      nlohmann::json doc = prof;
      at(doc["accelerators"][id], path + ".value") = v;
      const std::string msg = profile_error(doc);
      expect_names(msg, {kProfilePath, "'" + id + "'", "'" + path + "'"});
      EXPECT_TRUE(msg.find("not finite") != std::string::npos ||
                  msg.find("plausible range") != std::string::npos)
          << msg;
    }
  }
}

}  // namespace
}  // namespace ridge::perf
