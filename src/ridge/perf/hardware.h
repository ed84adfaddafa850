// perf/hardware: the accelerator database (data/hardware.json) and measured profiles.
//
// Every number in the file is {value, unit, source}; the loader converts to SI (FLOP/s, bytes,
// bytes/s per direction, W, USD/h, s), checks the unit belongs to the quantity and the value
// lies in a plausible range, and throws ridge::Error naming the file, accelerator and field.
// A profile (what `ridge bench ceilings` writes) is a file of the same format whose entries name
// a `base` entry: it inherits every field of the base and overrides the measured ones.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ridge::perf {

struct Link {
  std::string name;        // "nvlink", "pcie"
  std::string generation;  // "NVLink 4", "PCIe 6.0 x16"
  double bytes_per_s = 0;  // per direction
};

struct Hardware {
  std::string id;    // database key, e.g. "h100-sxm"
  std::string name;  // marketing name
  std::string base;  // for a profile: the entry it was merged over
  bool measured = false;
  std::map<std::string, double> dense_flops;  // format ("bf16", "fp8", "fp4", ...) -> FLOP/s
  double memory_bytes = 0;
  std::string memory_type;
  double memory_bw = 0;                 // bytes/s
  std::optional<double> l2_bytes;
  std::optional<int> sms;
  int max_warps_per_sm = 64;
  std::map<std::string, Link> links;
  std::optional<double> tdp_w;
  std::optional<double> idle_w;         // measured idle power (profiles)
  std::optional<double> price_per_hour; // USD
  // Sustained work under the power cap (profiles; docs/PERF.md, "The power cap"). Work that runs
  // for long enough that the card's power controller acts (a serving run's back-to-back steps,
  // not one benchmarked step) spends energy per FLOP and per byte; at the cap (tdp) a step then
  // takes at least flops / capped_flops + bytes / capped_bandwidth. capped_flops: dense bf16
  // FLOP/s a GEMM sustains at the cap (other formats scale with their peaks); capped_bandwidth:
  // the bytes/s that would spend the whole cap on memory traffic alone (above memory_bw when
  // streaming alone stays under the cap).
  std::optional<double> capped_flops;
  std::optional<double> capped_bandwidth;
  // Launch and host costs of a step (docs/PERF.md, "Execution"). kernel_overhead: GPU time per
  // kernel beyond its roofline when kernels run back to back (a CUDA graph's node: the gap, ramp
  // and tail); launch_overhead: host time per eager launch (the issue interval of back-to-back
  // launches of an empty kernel); gemm_launch_overhead: the same for one cuBLASLt matmul call
  // (launch_overhead when not measured); host_copy_latency: one small host<->device copy issued
  // and completed; host_copy_bw: device-to-host bandwidth into pageable memory (the logits);
  // pinned_copy_bw: the same into pinned memory.
  double kernel_overhead_s = 2e-6;
  double launch_overhead_s = 4e-6;
  std::optional<double> gemm_launch_overhead_s;
  double host_copy_latency_s = 10e-6;
  double host_copy_bw = 10e9;
  double pinned_copy_bw = 25e9;
  // GPU time per transformer layer that a persistent batch-1 decode kernel (one launch for every
  // layer, KernelPlan::persistent_decode) spends beyond its weight stream: the chain of dependent
  // round trips through L2 that nothing overlaps (phase releases, tickets, attention's loads and
  // merge), each slower while the stream fills the memory system (docs/KERNELS.md, "Run 17").
  double layer_sync_s = 16e-6;
  // The decode attention kernel's latency at few blocks (docs/KERNELS.md, "Run 42" to "Run
  // 44"): a block with one warp a sub-partition hides none of its tile's latencies, so a launch
  // of one wave takes attention_block (its round trips before the first tile and its warps'
  // merge) plus attention_tile per 64-position KV tile of its longest block, plus
  // attention_merge when its KV splits merge through memory (partials, fence, ticket, reads:
  // three L2 round trips).
  double attention_tile_s = 0.67e-6;
  double attention_block_s = 2.0e-6;
  double attention_merge_s = 1.5e-6;
  // Fractions of this entry's roofline that real kernels reach (used when
  // CostOptions::achievable is set). The database's defaults are measured against a measured
  // ceiling (a profile from `ridge bench ceilings`); on datasheet figures they flatter.
  struct Efficiency {
    double gemm_math = 1;         // compute-bound GEMMs: fraction of the dense peak
    double gemm_memory = 1;       // memory-bound GEMMs (decode GEMV-like): fraction of memory_bw
    double attention_math = 1;    // prefill attention: fraction of the dense peak
    double attention_memory = 1;  // decode attention (KV streaming): fraction of memory_bw
    double elementwise = 1;       // norms, RoPE, SiLU*mul, KV store, embedding, gathers, sampling
  } efficiency;
  double gemm_launch_s() const { return gemm_launch_overhead_s.value_or(launch_overhead_s); }
  std::map<std::string, std::string> sources;  // field path -> source text
  std::vector<std::string> estimates;          // field paths whose figure is an estimate

  // Peak dense FLOP/s for a number format; throws naming the formats that are known.
  double peak(std::string_view format) const;
  bool has_peak(std::string_view format) const { return dense_flops.count(std::string(format)) > 0; }
  // Critical arithmetic intensity (FLOP per byte) = peak / memory bandwidth.
  double critical_intensity(std::string_view format) const { return peak(format) / memory_bw; }
  // Per-direction bandwidth of a named link; throws if the device has no such link.
  const Link& link(std::string_view name) const;
  // A copy whose compute, bandwidth and SMs are a fraction of this device (an SM partition of
  // one GPU, e.g. through green contexts). Bandwidth, power and the power cap's rates are
  // assumed to split with the SMs.
  Hardware partition(double fraction) const;
  std::string describe() const;
};

class HardwareDb {
 public:
  // Parses and validates a database document; `origin` names it in errors (a file path).
  static HardwareDb parse(const nlohmann::json& doc, const std::string& origin);
  static HardwareDb load_file(const std::string& path);
  // data/hardware.json, found through $RIDGE_DATA_DIR, then the source tree the build came from,
  // then ./data and ../share/ridge/data next to the working directory.
  static HardwareDb load_default();
  static std::string default_path();

  // Merges a profile document over this database (entries with `base` inherit from entries
  // already here); returns the ids it added.
  std::vector<std::string> merge(const nlohmann::json& doc, const std::string& origin);

  // By id or alias (case-insensitive); throws listing the known ids.
  const Hardware& get(std::string_view id_or_alias) const;
  const Hardware* find(std::string_view id_or_alias) const;
  std::vector<std::string> ids() const;

  // A spec is an id/alias, or the path of a profile file: then the profile is merged over this
  // database and its (first) entry returned.
  Hardware resolve(const std::string& spec) const;
  // A profile file resolved over another (`under`: the project's measured profile of the same
  // GPU, data/profiles/<id>-ridge.json): the file's entries whose base is the base of `under`'s
  // (first) entry take that entry's fields beneath their own, over the same base. So a profile
  // of this run's ceilings (`ridge bench ceilings`, based on the datasheet entry) keeps its own
  // bandwidth and peaks and inherits the kernel efficiencies and latencies measured before, not
  // the datasheet's estimates, and its base is still the datasheet entry. A file of another base
  // is resolved as resolve() would; `layered` (optional) says which happened.
  Hardware resolve_over(const std::string& path, const std::string& under,
                        bool* layered = nullptr) const;

 private:
  std::map<std::string, Hardware> entries_;
  std::map<std::string, std::string> aliases_;
  nlohmann::json defaults_;
  std::map<std::string, nlohmann::json> raw_;  // merged raw entries, for profiles' bases
  void add_entry(const std::string& id, const nlohmann::json& raw, const std::string& origin);
};

// What `ridge bench ceilings` measured, written as a profile over a database entry.
struct Measurement {
  std::string field;   // "memory_bandwidth", "dense_flops.bf16", "l2", "sms", "idle_power", "tdp",
                       // "kernel_overhead", "launch_overhead", "efficiency.gemm_memory", ...
  double value = 0;
  std::string unit;    // a unit the loader accepts for that field ("TB/s", "TFLOP/s", "W", ...)
  std::string source;  // how it was measured: method, GPU name, driver, date
};
// `base` may be empty when the measurements hold every required field (name, dense_flops,
// memory, memory_bandwidth): the profile then stands alone.
nlohmann::json make_profile(const std::string& id, const std::string& base, const std::string& name,
                            const std::vector<Measurement>& measurements);
// The database entry a GPU of this name (as CUDA reports it, e.g. "NVIDIA H200") is an instance
// of: an id of the database, or "" when none matches.
std::string match_entry(const HardwareDb& db, std::string_view gpu_name);
// Writes atomically (temp file + rename); throws naming the path.
void write_profile(const std::string& path, const nlohmann::json& profile);

// Unit conversion used by the loader (exposed for tests): value in `unit` -> SI for `quantity`
// ("flops", "bytes", "bandwidth", "power", "price", "time", "count", "fraction"). Throws naming the unit and
// the units accepted for the quantity.
double to_si(std::string_view quantity, double value, std::string_view unit);

}  // namespace ridge::perf
