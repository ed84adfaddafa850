// The accelerator database: loads, validates, resolves aliases and profiles, reproduces the
// critical intensities of the scaling book (jax-ml.github.io/scaling-book/roofline/).
#include "ridge/perf/hardware.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "ridge/core/error.h"

namespace ridge::perf {
namespace {

const std::string kDb = std::string(RIDGE_SOURCE_DIR) + "/data/hardware.json";

const HardwareDb& db() {
  static const HardwareDb d = HardwareDb::load_file(kDb);
  return d;
}

// Expects parse() of `doc` to throw a ridge::Error whose message contains every `needle`.
void expect_error(const nlohmann::json& doc, std::initializer_list<const char*> needles) {
  try {
    HardwareDb::parse(doc, "test.json");
    FAIL() << "no error for " << doc.dump();
  } catch (const Error& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

nlohmann::json minimal_entry() {
  return {{"name", "Test GPU"},
          {"dense_flops", {{"bf16", {{"value", 100}, {"unit", "TFLOP/s"}, {"source", "test"}}}}},
          {"memory", {{"value", 16}, {"unit", "GB"}, {"source", "test"}}},
          {"memory_bandwidth", {{"value", 1}, {"unit", "TB/s"}, {"source", "test"}}}};
}
nlohmann::json doc_with(const nlohmann::json& entry) {
  return {{"schema", "ridge-hardware/1"}, {"accelerators", {{"t", entry}}}};
}

TEST(Hardware, DatabaseHoldsEveryAcceleratorOfTheIssue) {
  for (const char* id : {"a100-sxm", "h100-sxm", "h200", "b200", "gb200", "gb300", "rubin", "rubin-cpx"}) {
    const Hardware& h = db().get(id);
    EXPECT_FALSE(h.dense_flops.empty()) << id;
    EXPECT_GT(h.memory_bytes, 0) << id;
    EXPECT_GT(h.memory_bw, 0) << id;
    // Every figure carries its source.
    for (const auto& [path, src] : h.sources) EXPECT_FALSE(src.empty()) << id << " " << path;
    EXPECT_TRUE(h.sources.count("memory_bandwidth")) << id;
  }
  EXPECT_EQ(db().get("H100").id, "h100-sxm");  // alias, case-insensitive
  EXPECT_EQ(db().get("vr200").id, "rubin");
  EXPECT_EQ(db().get("cpx").id, "rubin-cpx");
}

TEST(Hardware, FiguresMatchTheDatasheets) {
  // HARDWARE.md table; SI units after loading.
  const Hardware& h100 = db().get("h100");
  EXPECT_DOUBLE_EQ(h100.peak("bf16"), 989e12);
  EXPECT_DOUBLE_EQ(h100.peak("fp8"), 1979e12);
  EXPECT_DOUBLE_EQ(h100.memory_bw, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.memory_bytes, 80e9);
  EXPECT_EQ(*h100.sms, 132);
  EXPECT_DOUBLE_EQ(*h100.l2_bytes, 50e6);
  EXPECT_DOUBLE_EQ(*h100.tdp_w, 700);
  // NVLink 900 GB/s counts both directions: 450 GB/s each way. PCIe 5 x16: 128 -> 64 GB/s.
  EXPECT_DOUBLE_EQ(h100.link("nvlink").bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(h100.link("pcie").bytes_per_s, 64e9);
  // PCIe Gen6 x16 of the Rubin CPX: ~1 Tbit/s per direction = 125 GB/s.
  EXPECT_DOUBLE_EQ(db().get("rubin-cpx").link("pcie").bytes_per_s, 125e9);
  EXPECT_DOUBLE_EQ(db().get("rubin").peak("fp4"), 33.3e15);
  EXPECT_DOUBLE_EQ(db().get("rubin-cpx").memory_bw, 2e12);
  EXPECT_DOUBLE_EQ(db().get("a100").memory_bw, 2.039e12);
  EXPECT_FALSE(db().get("a100").has_peak("fp8"));  // Ampere has no FP8
  // Not published: left out, not guessed.
  EXPECT_FALSE(db().get("rubin").has_peak("bf16"));
  EXPECT_FALSE(db().get("rubin-cpx").tdp_w.has_value());
  EXPECT_FALSE(db().get("gb300").price_per_hour.has_value());
}

TEST(Hardware, CriticalIntensitiesOfTheScalingBook) {
  // Critical intensity = peak FLOP/s / memory bandwidth (scaling book, roofline chapter):
  //   H100 bf16: 989e12 / 3.35e12 = 295.2 FLOP/byte
  //   H200 bf16: 989e12 / 4.8e12  = 206.0
  //   B200 bf16: 2.25e15 / 8e12   = 281.25
  // fp8 doubles the peak at the same bandwidth: 590.7, 412.3, 562.5.
  EXPECT_NEAR(db().get("h100").critical_intensity("bf16"), 295.2, 0.1);
  EXPECT_NEAR(db().get("h200").critical_intensity("bf16"), 206.0, 0.1);
  EXPECT_NEAR(db().get("b200").critical_intensity("bf16"), 281.25, 0.01);
  EXPECT_NEAR(db().get("h100").critical_intensity("fp8"), 1979.0 / 3.35, 0.1);  // 590.7
  EXPECT_NEAR(db().get("h200").critical_intensity("fp8"), 1979.0 / 4.8, 0.1);   // 412.3
  EXPECT_NEAR(db().get("b200").critical_intensity("fp8"), 562.5, 0.01);
  for (const char* id : {"h100", "h200", "b200"}) {
    const Hardware& h = db().get(id);
    EXPECT_NEAR(h.critical_intensity("fp8") / h.critical_intensity("bf16"), 2.0, 0.002) << id;  // 1979/989
  }
  // A100: 312e12 / 2.039e12 = 153.0.
  EXPECT_NEAR(db().get("a100").critical_intensity("bf16"), 153.0, 0.1);
}

TEST(Hardware, BadEntriesGiveClearErrors) {
  auto e = minimal_entry();
  EXPECT_NO_THROW(HardwareDb::parse(doc_with(e), "test.json"));

  e = minimal_entry();
  e["memory_bandwidth"]["unit"] = "TB";  // a size, not a bandwidth
  expect_error(doc_with(e), {"test.json", "'t'", "memory_bandwidth", "'TB'", "TB/s"});

  e = minimal_entry();
  e["memory_bandwidth"]["value"] = 3350;  // 3350 TB/s: someone meant GB/s
  expect_error(doc_with(e), {"memory_bandwidth", "plausible range"});

  e = minimal_entry();
  e["memory"].erase("source");
  expect_error(doc_with(e), {"memory", "source"});

  e = minimal_entry();
  e.erase("memory_bandwidth");
  expect_error(doc_with(e), {"memory_bandwidth", "missing"});

  e = minimal_entry();
  e["memroy"] = e["memory"];  // typo
  expect_error(doc_with(e), {"memroy", "unknown field"});

  e = minimal_entry();
  e["dense_flops"]["bf61"] = e["dense_flops"]["bf16"];
  expect_error(doc_with(e), {"dense_flops.bf61", "unknown number format"});

  e = minimal_entry();
  e["links"] = {{"nvlink", {{"value", 900}, {"unit", "GB/s"}, {"source", "x"}}}};  // no direction
  expect_error(doc_with(e), {"links.nvlink", "direction"});

  e = minimal_entry();
  e["tdp"] = {{"value", 700}, {"unit", "W"}, {"source", "x"}};
  e["idle_power"] = {{"value", 800}, {"unit", "W"}, {"source", "x"}};
  expect_error(doc_with(e), {"idle_power", "exceeds"});

  e = minimal_entry();
  e["sms"] = {{"value", 13.5}, {"unit", "count"}, {"source", "x"}};
  expect_error(doc_with(e), {"sms", "whole"});

  expect_error({{"schema", "other/2"}, {"accelerators", {{"t", minimal_entry()}}}}, {"schema"});
  expect_error(doc_with("not an object"), {"'t'"});
  EXPECT_THROW(db().get("h300"), Error);
  EXPECT_THROW(db().get("rubin").peak("bf16"), Error);
}

TEST(Hardware, UnitsConvert) {
  EXPECT_DOUBLE_EQ(to_si("bandwidth", 1, "Tbit/s"), 125e9);
  EXPECT_DOUBLE_EQ(to_si("bytes", 60, "MiB"), 60.0 * 1048576);
  EXPECT_DOUBLE_EQ(to_si("flops", 33.3, "PFLOP/s"), 33.3e15);
  EXPECT_DOUBLE_EQ(to_si("time", 2, "us"), 2e-6);
  EXPECT_THROW(to_si("power", 1, "TB/s"), Error);
}

TEST(Hardware, ProfilesMergeOverTheirBase) {
  // What `ridge bench ceilings` writes: measured copy bandwidth and GEMM peak of an H200.
  auto prof = make_profile("h200-test", "h200", "NVIDIA H200 (measured)",
                           {{"memory_bandwidth", 4.24, "TB/s", "device copy, test"},
                            {"dense_flops.bf16", 772, "TFLOP/s", "cuBLAS 8192^3, test"},
                            {"idle_power", 80, "W", "nvidia-smi, test"}});
  const auto path = (std::filesystem::temp_directory_path() / "ridge-perf-profile-test.json").string();
  write_profile(path, prof);
  const Hardware h = db().resolve(path);
  std::filesystem::remove(path);
  EXPECT_EQ(h.id, "h200-test");
  EXPECT_EQ(h.base, "h200");
  EXPECT_TRUE(h.measured);
  EXPECT_DOUBLE_EQ(h.memory_bw, 4.24e12);            // measured
  EXPECT_DOUBLE_EQ(h.peak("bf16"), 772e12);          // measured
  EXPECT_DOUBLE_EQ(h.peak("fp8"), 1979e12);          // inherited from the datasheet entry
  EXPECT_DOUBLE_EQ(h.memory_bytes, 141e9);           // inherited
  EXPECT_DOUBLE_EQ(*h.idle_w, 80);
  EXPECT_EQ(h.sources.at("memory_bandwidth"), "device copy, test");

  // The committed profile of the project's H200 loads too.
  const Hardware r = db().resolve(std::string(RIDGE_SOURCE_DIR) + "/data/profiles/h200-ridge.json");
  EXPECT_EQ(r.base, "h200");
  EXPECT_DOUBLE_EQ(r.memory_bw, 4.24e12);
  // Every committed profile loads over its base (ridge bench model takes <id>-ridge.json for the
  // GPU it runs on), measured bandwidth below the datasheet's.
  int profiles = 0;
  for (const auto& f :
       std::filesystem::directory_iterator(std::string(RIDGE_SOURCE_DIR) + "/data/profiles")) {
    const Hardware p = db().resolve(f.path().string());
    ASSERT_FALSE(p.base.empty()) << f.path();
    EXPECT_EQ(f.path().filename().string(), p.base + "-ridge.json");
    EXPECT_GT(p.memory_bw, 0.5 * db().get(p.base).memory_bw) << f.path();
    EXPECT_LE(p.memory_bw, db().get(p.base).memory_bw) << f.path();
    ++profiles;
  }
  EXPECT_GE(profiles, 2);

  // A profile over an unknown base names it.
  HardwareDb copy = db();
  auto bad = make_profile("x", "h300", "x", {});
  try {
    copy.merge(bad, "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h300"), std::string::npos);
  }
}

TEST(Hardware, CeilingsProfileGoesOverTheProjectsMeasuredProfile) {
  // This run's ceilings (`ridge bench ceilings` on an H100: based on the datasheet entry) over the
  // committed H100 profile: the file's bandwidth and peak, the committed profile's measured kernel
  // efficiencies, the datasheet's figures neither names.
  const std::string ridge = std::string(RIDGE_SOURCE_DIR) + "/data/profiles/h100-sxm-ridge.json";
  const Hardware committed = db().resolve(ridge), sheet = db().get("h100-sxm");
  ASSERT_EQ(committed.base, "h100-sxm");
  // The case that matters: the committed profile measured what the datasheet only estimates.
  ASSERT_NE(committed.efficiency.attention_memory, sheet.efficiency.attention_memory);
  const double bw = 0.9 * committed.memory_bw / 1e12, flops = 0.95 * committed.peak("bf16") / 1e12;
  const auto path = (std::filesystem::temp_directory_path() / "ridge-perf-over-test.json").string();
  write_profile(path, make_profile("h100-sxm-measured", "h100-sxm", "NVIDIA H100 (this run)",
                                   {{"memory_bandwidth", bw, "TB/s", "this run's copy"},
                                    {"dense_flops.bf16", flops, "TFLOP/s", "this run's GEMM"}}));
  bool layered = false;
  const Hardware h = db().resolve_over(path, ridge, &layered);
  EXPECT_TRUE(layered);
  EXPECT_EQ(h.id, "h100-sxm-measured");
  EXPECT_EQ(h.base, "h100-sxm");  // a profile made from it (--calibrated-profile) loads alone
  EXPECT_TRUE(h.measured);
  EXPECT_DOUBLE_EQ(h.memory_bw, bw * 1e12);
  EXPECT_DOUBLE_EQ(h.peak("bf16"), flops * 1e12);
  EXPECT_EQ(h.sources.at("memory_bandwidth"), "this run's copy");
  EXPECT_DOUBLE_EQ(h.efficiency.attention_memory, committed.efficiency.attention_memory);
  EXPECT_DOUBLE_EQ(h.efficiency.elementwise, committed.efficiency.elementwise);
  EXPECT_DOUBLE_EQ(h.launch_overhead_s, committed.launch_overhead_s);
  EXPECT_DOUBLE_EQ(h.peak("fp8"), sheet.peak("fp8"));  // named by neither profile
  // Plain resolve() keeps the datasheet's estimates under the same file.
  EXPECT_DOUBLE_EQ(db().resolve(path).efficiency.attention_memory,
                   sheet.efficiency.attention_memory);

  // A file of another GPU is not layered over the H100's profile.
  write_profile(path, make_profile("h200-measured", "h200", "NVIDIA H200 (this run)",
                                   {{"memory_bandwidth", 4.1, "TB/s", "this run's copy"}}));
  const Hardware other = db().resolve_over(path, ridge, &layered);
  std::filesystem::remove(path);
  EXPECT_FALSE(layered);
  EXPECT_EQ(other.base, "h200");
  EXPECT_DOUBLE_EQ(other.efficiency.attention_memory, db().get("h200").efficiency.attention_memory);
}

TEST(Hardware, PartitionScalesComputeAndBandwidth) {
  const Hardware p = db().get("h200").partition(0.25);
  EXPECT_DOUBLE_EQ(p.peak("bf16"), 989e12 * 0.25);
  EXPECT_DOUBLE_EQ(p.memory_bw, 4.8e12 * 0.25);
  EXPECT_EQ(*p.sms, 33);  // 132 / 4
}

}  // namespace
}  // namespace ridge::perf
