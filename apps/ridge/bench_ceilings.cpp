// ridge bench ceilings: measures the GPU at hand (perf/gpu: copy and read-only streaming
// bandwidth, the best cuBLASLt bf16 GEMM, eager and graph launch overheads, host copies, L2 and
// SMs), prints them next to the datasheet entry of the database, and writes them with --out as a
// hardware profile (data/hardware.json's format, merged over that entry) that `ridge plan
// --hardware FILE` and `ridge bench model --hardware FILE` load. Needs a CUDA build and a GPU.
#include <cstdint>
#include <ctime>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ridge/core/error.h"
#include "ridge/perf/hardware.h"
#include "common.h"
#include "subcommand.h"
#ifdef RIDGE_HAVE_PERF_GPU
#include "ridge/perf/gpu/ceilings.h"
#endif

namespace {

struct CeilingFlags {
  std::string out;
  std::string id;
  std::string base;  // "" : the database entry matching the GPU's name
  std::string json_out;
  bool quick = false;
};

#ifdef RIDGE_HAVE_PERF_GPU

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

void run(const CeilingFlags& f) {
  using namespace ridge;
  std::string why;
  if (!perf::gpu::device_present(&why))
    fail("ridge bench ceilings measures a GPU, and none can be used: {}", why);
  const perf::HardwareDb db = perf::HardwareDb::load_default();
  const perf::gpu::DeviceInfo dev = perf::gpu::device_info();
  const std::string base = f.base.empty() ? perf::match_entry(db, dev.name) : f.base;
  const perf::Hardware* sheet = base.empty() ? nullptr : &db.get(base);  // throws on a bad --base
  fmt::print("GPU       {} ({} SMs, sm_{}{}, L2 {:.1f} MiB, {:.1f} GiB), driver {}, runtime {}\n",
             dev.name, dev.sms, dev.cc_major, dev.cc_minor, double(dev.l2_bytes) / (1 << 20),
             double(dev.memory_bytes) / double(1ull << 30), version_text(dev.driver_version),
             version_text(dev.runtime_version));
  fmt::print("datasheet {}\n", sheet ? sheet->describe() : "none matches this GPU (give --base ID)");

  perf::gpu::CeilingOptions o;
  if (f.quick) {
    o.read_bytes = size_t(1) << 30;
    o.copy_bytes = size_t(512) << 20;
    o.gemm_sizes = {4096, 8192};
    o.repeats = 3;
    o.launches = 5000;
    o.graph_nodes = 1000;
  }
  const perf::gpu::Ceilings c = perf::gpu::measure(o, [](const std::string& what) {
    fmt::print(stderr, "  measuring {}\n", what);
  });

  const double mem_bw = std::max({c.read_bw, c.copy_kernel_bw, c.memcpy_bw});
  auto ratio = [](double measured, std::optional<double> sheet_value) {
    return sheet_value && *sheet_value > 0 ? fmt::format("{:.2f}", measured / *sheet_value) : std::string("-");
  };
  std::optional<double> sheet_bw, sheet_bf16;
  if (sheet) {
    sheet_bw = sheet->memory_bw;
    if (sheet->has_peak("bf16")) sheet_bf16 = sheet->peak("bf16");
  }
  fmt::print("\n  {:<44} {:>16} {:>16} {:>8}\n", "ceiling", "measured", "database", "ratio");
  auto row = [](const std::string& name, const std::string& m, const std::string& d, const std::string& r) {
    fmt::print("  {:<44} {:>16} {:>16} {:>8}\n", name, m, d, r);
  };
  auto tbs = [](double v) { return fmt::format("{:.2f} TB/s", v / 1e12); };
  auto us = [](double v) { return fmt::format("{:.2f} us", v * 1e6); };
  row(fmt::format("read-only stream, 16-byte loads, {:.0f} GiB", double(o.read_bytes) / (1 << 30)), tbs(c.read_bw), "", "");
  row("copy kernel, 16-byte (read + write)", tbs(c.copy_kernel_bw), "", "");
  row("cudaMemcpy device to device (read + write)", tbs(c.memcpy_bw), "", "");
  row("memory bandwidth (best of the three)", tbs(mem_bw), sheet_bw ? tbs(*sheet_bw) : "-", ratio(mem_bw, sheet_bw));
  for (const auto& g : c.gemm)
    row(fmt::format("cuBLASLt bf16 GEMM {}^3", g.n), fmt::format("{:.1f} TFLOP/s", g.flops / 1e12), "", "");
  row("bf16 dense peak (best GEMM)", fmt::format("{:.1f} TFLOP/s", c.gemm_bf16_flops / 1e12),
      sheet_bf16 ? fmt::format("{:.1f} TFLOP/s", *sheet_bf16 / 1e12) : "-", ratio(c.gemm_bf16_flops, sheet_bf16));
  row("eager launch, empty kernel (back to back)", us(c.launch_eager_s),
      sheet ? us(sheet->launch_overhead_s) : "-", ratio(c.launch_eager_s, sheet ? std::optional(sheet->launch_overhead_s) : std::nullopt));
  row("graph node, empty kernel (replayed)", us(c.launch_graph_s),
      sheet ? us(sheet->kernel_overhead_s) : "-", ratio(c.launch_graph_s, sheet ? std::optional(sheet->kernel_overhead_s) : std::nullopt));
  row("eager cuBLASLt call (64^3, back to back)", us(c.launch_cublaslt_s), "", "");
  row("4 KiB host->device (pageable) + sync", us(c.h2d_small_s),
      sheet ? us(sheet->host_copy_latency_s) : "-", ratio(c.h2d_small_s, sheet ? std::optional(sheet->host_copy_latency_s) : std::nullopt));
  row("8 MiB device->host, pageable", fmt::format("{:.1f} GB/s", c.d2h_pageable_bw / 1e9),
      sheet ? fmt::format("{:.1f} GB/s", sheet->host_copy_bw / 1e9) : "-", ratio(c.d2h_pageable_bw, sheet ? std::optional(sheet->host_copy_bw) : std::nullopt));
  row("8 MiB device->host, pinned", fmt::format("{:.1f} GB/s", c.d2h_pinned_bw / 1e9),
      sheet ? fmt::format("{:.1f} GB/s", sheet->pinned_copy_bw / 1e9) : "-", ratio(c.d2h_pinned_bw, sheet ? std::optional(sheet->pinned_copy_bw) : std::nullopt));
  row("L2", fmt::format("{:.1f} MiB", double(dev.l2_bytes) / (1 << 20)),
      sheet && sheet->l2_bytes ? fmt::format("{:.1f} MiB", *sheet->l2_bytes / (1 << 20)) : "-", "");
  row("SMs", fmt::format("{}", dev.sms), sheet && sheet->sms ? fmt::format("{}", *sheet->sms) : "-", "");

  if (f.out.empty() && f.json_out.empty()) return;
  const std::string when = fmt::format("{} on {} (driver {}, runtime {})", now_utc(), dev.name,
                                       version_text(dev.driver_version), version_text(dev.runtime_version));
  auto src = [&](const std::string& how) { return fmt::format("measured by ridge bench ceilings, {}: {}", when, how); };
  std::vector<perf::Measurement> ms = {
      {"memory_bandwidth", mem_bw / 1e12, "TB/s",
       src(fmt::format("best of a read-only 16-byte streaming kernel over {:.0f} GiB ({:.3f} TB/s), a "
                       "16-byte copy kernel ({:.3f} TB/s read + write) and cudaMemcpy device to device "
                       "({:.3f} TB/s read + write)",
                       double(o.read_bytes) / (1 << 30), c.read_bw / 1e12, c.copy_kernel_bw / 1e12,
                       c.memcpy_bw / 1e12))},
      {"dense_flops.bf16", c.gemm_bf16_flops / 1e12, "TFLOP/s",
       src("best cuBLASLt bf16 GEMM (fp32 accumulate) of the square sizes timed after a warm-up")},
      {"memory", double(dev.memory_bytes) / double(1ull << 30), "GiB", src("cudaDeviceProp.totalGlobalMem")},
      {"l2", double(dev.l2_bytes) / (1 << 20), "MiB", src("cudaDeviceProp.l2CacheSize")},
      {"sms", double(dev.sms), "count", src("cudaDeviceProp.multiProcessorCount")},
      {"kernel_overhead", c.launch_graph_s * 1e6, "us",
       src(fmt::format("a captured CUDA graph of {} empty kernels, replayed: time per node", o.graph_nodes))},
      {"launch_overhead", c.launch_eager_s * 1e6, "us",
       src(fmt::format("{} empty kernels launched back to back on one stream: time per launch", o.launches))},
      {"gemm_launch_overhead", c.launch_cublaslt_s * 1e6, "us",
       src("cuBLASLt bf16 matmuls of 64^3 called back to back: time per call")},
      {"host_copy_latency", c.h2d_small_s * 1e6, "us", src("4 KiB pageable host-to-device cudaMemcpyAsync plus a stream sync")},
      {"host_copy_bandwidth", c.d2h_pageable_bw / 1e9, "GB/s", src("8 MiB device-to-host copies into pageable memory (copy + sync)")},
      {"pinned_copy_bandwidth", c.d2h_pinned_bw / 1e9, "GB/s", src("8 MiB device-to-host copies into pinned memory (copy + sync)")},
  };
  std::string id = f.id;
  if (id.empty()) id = (base.empty() ? std::string("gpu") : base) + "-measured";
  nlohmann::json prof = perf::make_profile(id, base, dev.name + " (measured by ridge bench ceilings)", ms);
  const std::string cmd = ridge::app::command_line();
  nlohmann::json raw = {{"command", cmd},
                        {"date", now_utc()},
                        {"gpu", dev.name},
                        {"sms", dev.sms},
                        {"l2_bytes", dev.l2_bytes},
                        {"memory_bytes", dev.memory_bytes},
                        {"compute_capability", fmt::format("{}.{}", dev.cc_major, dev.cc_minor)},
                        {"driver", version_text(dev.driver_version)},
                        {"runtime", version_text(dev.runtime_version)},
                        {"read_bytes", o.read_bytes},
                        {"copy_bytes", o.copy_bytes},
                        {"read_bw_bytes_s", c.read_bw},
                        {"copy_kernel_bw_bytes_s", c.copy_kernel_bw},
                        {"memcpy_bw_bytes_s", c.memcpy_bw},
                        {"gemm_bf16_flops", c.gemm_bf16_flops},
                        {"launch_eager_s", c.launch_eager_s},
                        {"launch_graph_node_s", c.launch_graph_s},
                        {"launch_cublaslt_s", c.launch_cublaslt_s},
                        {"h2d_small_s", c.h2d_small_s},
                        {"d2h_pageable_bytes_s", c.d2h_pageable_bw},
                        {"d2h_pinned_bytes_s", c.d2h_pinned_bw}};
  nlohmann::json gemms = nlohmann::json::array();
  for (const auto& g : c.gemm) gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", g.seconds}, {"flops", g.flops}});
  raw["gemm"] = gemms;
  prof["measurements"] = raw;  // beside the entry: the loader reads only schema and accelerators
  if (!f.out.empty()) {
    perf::write_profile(f.out, prof);
    // Read it back the way `ridge plan --hardware FILE` will.
    const perf::Hardware h = db.resolve(f.out);
    fmt::print("\nwrote {}: {}\n", f.out, h.describe());
  }
  if (!f.json_out.empty()) perf::write_profile(f.json_out, raw);
}

#else

void run(const CeilingFlags&) {
  ridge::fail("ridge bench ceilings measures the GPU and needs a CUDA build of ridge: this one has "
              "no CUDA (configure with RIDGE_CUDA=ON and nvcc on the PATH, on a machine with the "
              "CUDA toolkit)");
}

#endif

void setup(CLI::App& sub) {
  auto f = std::make_shared<CeilingFlags>();
  sub.add_option("--out", f->out, "write the measurements as a hardware profile (data/hardware.json format)");
  sub.add_option("--id", f->id, "the profile's accelerator id (default: <base>-measured)");
  sub.add_option("--base", f->base,
                 "the database entry the profile is merged over (default: the one matching the GPU's name)");
  sub.add_option("--json-out", f->json_out, "also write the raw measurements as JSON");
  sub.add_flag("--quick", f->quick, "smaller buffers and fewer repeats (a smoke test, not a ceiling)");
  sub.callback([f, &sub] {
    run(*f);
  });
}

const ridge::app::BenchRegistrar reg(
    "ceilings", "Measure the GPU (bandwidth, GEMM peak, launch overheads) and write a hardware profile", &setup);

}  // namespace
